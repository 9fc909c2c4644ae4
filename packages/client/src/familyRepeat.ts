import { isDeepStrictEqual } from 'node:util';
import type { QueuedTask, TaskOrigin, TaskOriginRef, WorkflowRecord } from '@troupe/protocol';
import { z } from 'zod';
import { originAsked } from './originAsked.ts';

/** A restart or fork asked for again under an id it names (an idempotency key's): what it asks, to compare. */
export interface FamilyRequest {
  origin: TaskOrigin;
  /** A fork's new input. */
  input?: Record<string, unknown>;
}

/** The task already made under the id: its record once claimed, else its queued mark. */
export type MadeTask = { record: WorkflowRecord } | { mark: QueuedTask };

/** The outputs a fork's `set` edited, as the workflow's snapshot keeps its reused steps (the claim's `reuse`). */
const SnapshotReuse = z.object({
  context: z.object({
    task: z.object({
      reuse: z
        .record(
          z.string(),
          z.object({ step: z.string(), output: z.string(), edited: z.literal(true).optional() }),
        )
        .optional(),
    }),
  }),
});

/**
 * Why the task made under an id is not the one a restart or fork asks for again under it, as a reader can act on; undefined
 * when it is (or nothing tells them apart). A key reused with other arguments is refused, as HTTP APIs with idempotency
 * keys do: answering the first task while saying it runs from the new step would hide that nothing new runs.
 *
 * Compared: the kind, the step, `newest`, and for a fork which fields it edits, and, from the made task's record, its new
 * input and the outputs it set. A task not yet claimed shows only its origin (its mark), so its input and outputs are not
 * compared until it is.
 */
export function familyRepeatProblem(made: MadeTask, request: FamilyRequest): string | undefined {
  const earlier: TaskOriginRef | undefined = 'record' in made ? made.record.origin : made.mark.origin;
  const { origin } = request;
  if (!earlier) return `it names task ${taskIdOf(made)}, which is no restart or fork`;
  const asked = `a ${earlier.kind} of task ${earlier.taskId} from step ${earlier.step}${earlier.newest ? ' on the newest version' : ''}`;
  const differs =
    earlier.taskId !== origin.taskId ||
    earlier.kind !== origin.kind ||
    earlier.step !== origin.step ||
    (earlier.newest ?? false) !== (origin.newest ?? false) ||
    !sameEdits(earlier, origin, request) ||
    ('record' in made && !sameValues(made.record, request));
  return differs
    ? `it was used for ${asked}${earlier.kind === 'fork' ? ' with other edits' : ''}`
    : undefined;
}

const taskIdOf = (made: MadeTask) => ('record' in made ? made.record.taskId : made.mark.taskId);

/** Whether the fork edits the same fields: its input or not, and the same steps' outputs. */
function sameEdits(earlier: TaskOriginRef, origin: TaskOrigin, request: FamilyRequest): boolean {
  if (origin.kind !== 'fork') return true;
  const wanted = [
    ...(request.input ? ['input'] : []),
    ...Object.keys(origin.set ?? {}).map((step) => `steps.${step}.output`),
  ].sort();
  // The claim may add `goal` (a fork published with a new goal): no request through a client asks for that.
  const made = (earlier.edited ?? []).filter((field) => field !== 'goal').sort();
  return isDeepStrictEqual(made, wanted);
}

/** Whether the made fork's input and set outputs, as its record's snapshot keeps them, are the ones asked for. */
function sameValues(record: WorkflowRecord, request: FamilyRequest): boolean {
  if (request.origin.kind !== 'fork') return true;
  if (request.input) {
    const found = originAsked(record, { goal: record.goal });
    // An input cut to previews of its stored whole is not read back here: its previews are compared.
    if (
      found.ok &&
      found.from === 'record' &&
      !found.asked.inputCut &&
      !isDeepStrictEqual(found.asked.input ?? {}, request.input)
    )
      return false;
  }
  const reuse = SnapshotReuse.safeParse(record.snapshot);
  if (!reuse.success) return true;
  const set = Object.fromEntries(
    Object.values(reuse.data.context.task.reuse ?? {})
      .filter((step) => step.edited)
      .map((step) => [step.step, step.output]),
  );
  return Object.entries(request.origin.set ?? {}).every(
    ([step, output]) => set[step] === undefined || set[step] === output,
  );
}
