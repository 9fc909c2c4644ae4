import { z } from 'zod';
import type { TaskEnding } from './control.ts';
import { TroupeEvent } from './events.ts';
import { Name, TaskId } from './names.ts';
import { ToldMessage } from './step.ts';
import { TaskOriginRef } from './task.ts';
import { UsageTotals } from './usage.ts';

/** What the step a task waits on is doing, as its workflow last heard: for `troupe status`. */
export const StepActivity = z.discriminatedUnion('kind', [
  /** The agent waits for a person to decide an approval or answer a question. */
  z.object({
    kind: z.literal('person'),
    step: z.string(),
    agent: Name,
    request: z.object({ kind: z.enum(['approval', 'question']), id: z.string() }),
    since: z.string(),
  }),
  /** No worker serves the step's agent: the step waits for one to start. */
  z.object({ kind: z.literal('worker'), step: z.string(), agent: Name, since: z.string() }),
  /** The agent works on the step (a tool, its own reasoning, a quick model call). */
  z.object({ kind: z.literal('agent'), step: z.string(), agent: Name, since: z.string() }),
  /** The agent has waited a while on its model's reply. */
  z.object({ kind: z.literal('model'), step: z.string(), agent: Name, since: z.string() }),
]);
export type StepActivity = z.infer<typeof StepActivity>;

/** What the KV bucket `workflows` holds per task: where it stands, and the actor's persisted snapshot. */
const WorkflowRecordShape = z.object({
  taskId: TaskId,
  pipeline: Name,
  /** The `TASKS` message this task came from; a redelivery of it resumes, a new message with the same id is a duplicate. */
  streamSequence: z.number().int().nonnegative(),
  status: z.enum(['running', 'completed', 'failed', 'cancelled']),
  /** The workflow state (a step id, `completed` or `failed`). */
  state: z.string(),
  /**
   * The hash of the pipeline version the task runs on: the one it started on, or one `troupe migrate` moved it to.
   * Absent in records from before versions were kept: such a task runs on whatever the coordinator has loaded.
   */
  version: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
  goal: z.string(),
  /** The task's labels (who submitted it, a ticket, the gateway session it belongs to). */
  metadata: z.record(z.string(), z.string()).optional(),
  round: z.number().int().positive(),
  usage: UsageTotals,
  createdAt: z.string(),
  updatedAt: z.string(),
  /** XState persisted snapshot; restored with `createActor(machine, { snapshot })`. */
  snapshot: z.unknown().optional(),
  /**
   * The task's final event, stored before it is published: a coordinator that dies between the two leaves
   * the message unacknowledged, and the one that gets it again publishes this same event (same id).
   */
  final: TroupeEvent.optional(),
  /**
   * The lease of the coordinator run that owns the task now: a token of that run's own. Each run writes the record
   * only at the revision it last wrote; finding another run's token there means the task was taken over, and the
   * older run stops.
   */
  lease: z.string().optional(),
  /** Times a coordinator shutting down handed the task back (kept for records written before `delivery`). */
  handBacks: z.number().int().nonnegative().optional(),
  /** What its current step is doing, while it runs. */
  activity: StepActivity.optional(),
  /**
   * The task's W3C trace context, on the record its claim creates: a run resumed before any checkpoint holds the
   * workflow's snapshot (which carries it) continues the same trace.
   */
  traceparent: z.string().optional(),
  /** The ended task this one was restarted or forked from (`troupe restart`, `troupe fork`). */
  origin: TaskOriginRef.optional(),
  /** Set while a person holds the task (`troupe pause`): since when, by whom, why. `status` stays `running`. */
  paused: z
    .object({ since: z.string(), by: z.string().optional(), reason: z.string().optional() })
    .optional(),
  /**
   * How long people held the task in all, in ms, over the pauses that have ended: its deadline comes that much later
   * (and a step's timeout does not count the time it was held).
   */
  pausedMs: z.number().nonnegative().optional(),
  /** Messages people told the task (`troupe tell`) that no finished step has read yet, oldest first. */
  told: z.array(ToldMessage).optional(),
  /** How many messages people have told the task so far: the next one's id is `m-<toldCount + 1>`. */
  toldCount: z.number().int().nonnegative().optional(),
  /**
   * The keys the latest tells came with (at most MAX_TOLD_KEYS, and as many more of those a parent forwarded with,
   * oldest first), each with the id of the message it made: a tell again with one of them is answered with that id
   * and told nothing new.
   */
  toldKeys: z.array(z.object({ key: z.string(), messageId: z.string() })).optional(),
  /**
   * Of the messages in `told`, those a step has read already, each with the steps that still owe it a reading: at
   * work when it was told (or given it since) and not done with it, by step id (a `pipeline` step's is its sub-task's
   * id). Only they are given it: a restored task gives no other step a message one has read. Absent when there are none.
   */
  toldOwed: z.array(z.object({ messageId: z.string(), steps: z.array(z.string()).min(1) })).optional(),
  /** Checkpoints that recorded a transition of the workflow: how far the task has come. */
  progress: z.number().int().nonnegative().optional(),
  /**
   * The delivery that runs (or last ran) the task: the progress it started from, how many deliveries in a row
   * before it made none (each counts towards maxDeliver), and whether a clean shutdown handed it back.
   */
  delivery: z
    .object({
      progress: z.number().int().nonnegative(),
      stalls: z.number().int().nonnegative(),
      handedBack: z.boolean().optional(),
    })
    .optional(),
});

/** Records written before the lease was named so kept it as `runner`: read as `lease`. */
function fromOlderRecord(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || !('runner' in value)) return value;
  const { runner, ...rest } = value as Record<string, unknown>;
  return 'lease' in rest ? rest : { ...rest, lease: runner };
}

export const WorkflowRecord = z.preprocess(fromOlderRecord, WorkflowRecordShape);
export type WorkflowRecord = z.infer<typeof WorkflowRecord>;

/** How the task of a record ended, with the reason of a failure; undefined while it runs. */
export function endingOfRecord(record: WorkflowRecord): TaskEnding | undefined {
  if (record.status === 'running') return undefined;
  const final = record.final;
  const reason = final?.kind === 'task.failed' ? final.data.reason : undefined;
  return { status: record.status, ...(reason === undefined ? {} : { reason }) };
}
