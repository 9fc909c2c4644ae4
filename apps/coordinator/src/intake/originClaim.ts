import { isDeepStrictEqual } from 'node:util';
import {
  type OriginAsked,
  originAsked,
  type ReusedSteps,
  type ReusedWorkspace,
  reusePlan,
} from '@troupe/client';
import {
  fillInput,
  type InputCut,
  type TaskOrigin,
  type TroupeEvent,
  type WorkflowRecord,
} from '@troupe/protocol';
import { redactDeep, ValueStoreError } from '@troupe/runtime';
import type { TaskServices } from '../task/taskServices.ts';
import { originWorkspace } from './originWorkspace.ts';

/**
 * What a restart or fork starts from: its origin's version (none: the newest), the step outputs it reuses, and what
 * it changed from its origin (`edited`: what the submission said, with what its goal and input show it changed).
 */
export type OriginClaim =
  | {
      ok: true;
      version: string | undefined;
      reuse: ReusedSteps;
      edited?: string[];
      /** The origin's workspace files as the step it runs from first started there (reusedWorkspace.ts). */
      workspace: ReusedWorkspace;
    }
  | { ok: false; problem: string };

/** What a restart or fork was submitted with, that its origin was accepted with too: a difference is an edit. */
export interface OriginSubmitted {
  goal: string;
  /** As the workflow carries it: with the keys `inputCut` names cut to previews. */
  input?: Record<string, unknown> | undefined;
  inputCut?: InputCut | undefined;
}

type Accepted = Extract<TroupeEvent, { kind: 'task.accepted' }>;

/** The most entries an origin's `edited` holds (TaskOriginRef): one more fails the record's write, on every delivery. */
const EDITED_MAX = 64;

/**
 * Reads, as a restart or fork is first claimed, what it takes from its origin: the ended task's record (for the
 * version it ran on, which the new task runs on too, so the reused outputs meet the flow that made them) and its
 * events (for the outputs of the steps that completed before the origin step first started, edited as a fork's `set`
 * says). Read once: the outputs go into the task's input, and so into every checkpoint of it; an ended task's events
 * do not change, so a claim before the first checkpoint reads the same again.
 *
 * What the task was submitted with is compared with what its origin was accepted with, whatever the submission's
 * `edited` says: any NATS client may publish a fork, and a person's answer given about the original's goal and input
 * must not be reused for another's. A fork with a new goal or input is taken as edited there; a restart, which runs
 * the original as it was, with either changed is refused.
 */
export async function claimOrigin(
  { pipeline, store, taskEvents, values }: Pick<TaskServices, 'pipeline' | 'store' | 'taskEvents' | 'values'>,
  origin: TaskOrigin,
  submitted: OriginSubmitted,
): Promise<OriginClaim> {
  const { taskId, kind } = origin;
  const problem = (why: string): OriginClaim => ({
    ok: false,
    problem: `cannot ${kind} task ${taskId}: ${why}`,
  });
  // A store or stream that cannot be read now throws (the delivery comes again): only what was read is an answer.
  const record = (await store.get(taskId))?.value;
  if (!record) return problem('no such task is known');
  // KV `workflows` holds every pipeline's tasks, and a submitter of this pipeline may publish any origin here: one of
  // another pipeline would hand its outputs and file manifest to a task its readers and this pipeline's hosts see.
  if (record.pipeline !== pipeline)
    return problem(
      `it is not a task of pipeline ${pipeline}; a restart or fork runs in its origin's pipeline, so publish it there`,
    );
  if (record.status === 'running') return problem('it is still running');
  const events = await taskEvents(taskId, record.pipeline);
  const accepted = events.find((e): e is Accepted => e.kind === 'task.accepted');
  // EVENTS drops its oldest first (max_age, max_bytes): task.accepted can be gone while the steps' events, a person's
  // answer among them, are kept. Nothing then shows what the origin was asked to do, so no answer can be reused.
  if (!accepted) {
    return problem(
      "its task.accepted is gone from EVENTS, so what it was given to do cannot be compared with this one's; submit it as a new task",
    );
  }
  const changed = await changedFrom(values, record, accepted, submitted);
  if (kind === 'restart' && changed.length > 0) {
    return problem(
      `a restart runs with the original's goal and input, and this one's ${changed.join(' and ')} differ from it; to run with another, publish it as a fork (origin.kind "fork"), whose people are asked again`,
    );
  }
  // The record and task.accepted hold 64 entries at most (TaskOriginRef), which a submitter may have listed already:
  // then what the claim found goes first, since only `goal` and `input` decide whose answers are reused.
  const listed = [...new Set([...(origin.edited ?? []), ...changed])];
  const edited =
    listed.length <= EDITED_MAX
      ? listed
      : [...changed, ...listed.filter((field) => !changed.includes(field))].slice(0, EDITED_MAX);
  const plan = reusePlan(events, { ...origin, ...(edited.length > 0 ? { edited } : {}) });
  if (!plan.ok) return problem(plan.message);
  return {
    ok: true,
    // Undefined for a task asked to run on the newest version, as for a new task.
    version: origin.newest ? undefined : record.version,
    reuse: plan.steps,
    ...(edited.length > 0 ? { edited } : {}),
    workspace: await originWorkspace({ pipeline, store, taskEvents }, origin, record, events),
  };
}

/**
 * Which of `goal` and `input` the submission changed from its origin's: as the origin ran them (its record's
 * snapshot), since `task.accepted` shows them redacted and a restart carrying the real key is no change. An origin
 * whose record keeps no snapshot is compared by its event, with the submission redacted the same way.
 */
async function changedFrom(
  values: Pick<TaskServices, 'values'>['values'],
  record: WorkflowRecord,
  { data: accepted }: Accepted,
  submitted: OriginSubmitted,
): Promise<string[]> {
  const found = originAsked(record, accepted);
  const original: OriginAsked = found.ok
    ? found.asked
    : {
        goal: accepted.goal,
        ...(accepted.input ? { input: accepted.input } : {}),
        ...(accepted.inputCut ? { inputCut: accepted.inputCut } : {}),
      };
  const mine =
    found.ok && found.from === 'record'
      ? submitted
      : { ...submitted, goal: redactDeep(submitted.goal), input: redactDeep(submitted.input) };
  const goal = original.goal === mine.goal ? [] : ['goal'];
  const same = await sameInput(values, original, mine);
  return same ? goal : [...goal, 'input'];
}

/**
 * Whether two inputs are the same value. Inputs cut to previews are the same when their stored wholes' digests are
 * (the usual restart: the client stored the original's whole again), else their wholes are read and compared.
 */
async function sameInput(
  values: Pick<TaskServices, 'values'>['values'],
  a: OriginSubmitted,
  b: OriginSubmitted,
): Promise<boolean> {
  if (!a.inputCut && !b.inputCut) return isDeepStrictEqual(a.input ?? {}, b.input ?? {});
  if (a.inputCut?.ref.sha256 === b.inputCut?.ref.sha256 && isDeepStrictEqual(a.input, b.input)) return true;
  const [wholeA, wholeB] = await Promise.all([wholeInput(values, a), wholeInput(values, b)]);
  // One that can never be read is taken as changed: asking a person again is the safe side.
  return wholeA !== undefined && wholeB !== undefined && isDeepStrictEqual(wholeA, wholeB);
}

/** An input with its cut keys read back whole; undefined when its whole is gone or this coordinator reads none. */
async function wholeInput(
  values: Pick<TaskServices, 'values'>['values'],
  { input, inputCut }: OriginSubmitted,
): Promise<Record<string, unknown> | undefined> {
  if (!inputCut) return input ?? {};
  if (!values) return undefined;
  try {
    return fillInput(input, inputCut, await values.read(inputCut.ref));
  } catch (error) {
    // A store out of reach throws on: the delivery comes again.
    const lost = ValueStoreError.is(error, 'value_missing') || ValueStoreError.is(error, 'value_corrupt');
    if (lost || error instanceof SyntaxError) return undefined;
    throw error;
  }
}
