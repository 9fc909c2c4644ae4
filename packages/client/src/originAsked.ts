import { InputCut, type TroupeEvent, type WorkflowRecord } from '@troupe/protocol';
import { z } from 'zod';

/** What an ended task was asked to do, as its workflow ran it: the goal, and the input (with its stored whole's cut). */
export interface OriginAsked {
  goal: string;
  input?: Record<string, unknown>;
  inputCut?: InputCut;
}

/** Where it was read: the workflow's own copy (real values), or `task.accepted`, whose secrets are redacted. */
export type OriginAskedFrom =
  | { ok: true; asked: OriginAsked; from: 'record' | 'event' }
  | { ok: false; problem: string };

/** The part of the workflow's persisted snapshot that holds the task as claimed (the coordinator's `WorkflowInput`). */
const SnapshotTask = z.object({
  context: z.object({
    task: z.object({
      goal: z.string(),
      input: z.record(z.string(), z.unknown()).optional(),
      inputCut: InputCut.optional(),
    }),
  }),
});

/** The text events put in place of a secret (runtime's `REDACTED`; the client reads events, it makes none). */
const REDACTED = '[redacted]';

type Accepted = Extract<TroupeEvent, { kind: 'task.accepted' }>;

/**
 * The goal and input an ended task ran with, for a restart or fork to run with again and for its claim to compare
 * with. `task.accepted` will not do alone: events are redacted as they are made (an `sk-…` key, `user:pass@` in a
 * URL, a registered secret become `[redacted]`), so a restart built from it would run on `[redacted]`. The task's
 * record keeps the workflow's snapshot, whose context holds the task as it was claimed, unredacted: that is read
 * first. Without one (a record from before any checkpoint), the event serves only when nothing in it was redacted.
 */
export function originAsked(
  record: WorkflowRecord,
  accepted: Pick<Accepted['data'], 'goal' | 'input' | 'inputCut'>,
): OriginAskedFrom {
  const kept = SnapshotTask.safeParse(record.snapshot);
  if (kept.success) {
    const { goal, input, inputCut } = kept.data.context.task;
    return {
      ok: true,
      from: 'record',
      asked: { goal, ...(input ? { input } : {}), ...(inputCut ? { inputCut } : {}) },
    };
  }
  const asked: OriginAsked = {
    goal: accepted.goal,
    ...(accepted.input ? { input: accepted.input } : {}),
    ...(accepted.inputCut ? { inputCut: accepted.inputCut } : {}),
  };
  if (JSON.stringify([asked.goal, asked.input ?? null]).includes(REDACTED)) {
    return {
      ok: false,
      problem: `its goal or input held a secret, which its events keep only as ${REDACTED}, and its record keeps no copy of them; submit it again as a new task with the real values`,
    };
  }
  return { ok: true, from: 'event', asked };
}
