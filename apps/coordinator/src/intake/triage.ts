import {
  checkTaskInput,
  type InputCut,
  isTaskId,
  parseMessage,
  type QueuedTask,
  TaskSubmission,
  type TroupeEvent,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type KvEntry, logMessage } from '@troupe/runtime';
import type { TaskServices } from '../task/taskServices.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import { LIMIT_FLAGS } from './intakeLimits.ts';
import { endCancelledWhileQueued } from './queuedCancel.ts';
import { dropMark, readMark } from './queuedMark.ts';
import { endRefusedQueued } from './queuedRefusal.ts';
import { readStoredInput } from './storedInput.ts';
import type { TaskDelivery } from './taskQueue.ts';

/** A delivery of a task that may run: what it carries, and the task's record as read. */
export interface TriagedTask {
  delivery: TaskDelivery;
  taskId: string;
  submission: TaskSubmission;
  entry: KvEntry<WorkflowRecord> | undefined;
  /** Deliveries in a row, this one included, that made no progress. */
  stalls: number;
  /** The keys of `submission.input` cut to previews of the stored input, and where the whole is. */
  inputCut?: InputCut;
  /** Why the stored input of a task claimed before cannot be read: it fails, saying so. */
  inputProblem?: string;
  /** Its mark in KV `queued`, when it was submitted through the gateway and the mark is still there. */
  queued?: KvEntry<QueuedTask>;
  /**
   * The newest version, read once after the delivery for a task that starts on it: its input was checked against
   * this version's schema, and its claim starts it on this version, with no second read of the registry.
   */
  newest?: FlowVersion;
}

/** What to do with a delivery, as triage finds it. */
export type Triage =
  /**
   * Not a task: reported on `_invalid`; the message is terminated, never delivered again. A refused task marked queued
   * is also recorded failed (`refused`) and concluded instead, so it ends visibly.
   */
  | { next: 'refuse' }
  /** Nothing to do: a resubmission of a task id already taken, or an ended task with no final event. */
  | { next: 'ack' }
  /** A redelivery of a task this process runs now: left alone. */
  | { next: 'leave' }
  /** This process is stopping: the task is left to the next coordinator. */
  | { next: 'handBack' }
  /** Ended before (its coordinator may have died before publishing): its stored final event goes out again. */
  | { next: 'conclude'; final: TroupeEvent }
  /** Delivered too often without progress: given up on. */
  | { next: 'giveUp'; task: TriagedTask }
  /** A task to run: claimed next. */
  | { next: 'claim'; task: TriagedTask };

export type TriageServices = Pick<
  TaskServices,
  | 'pipeline'
  | 'bus'
  | 'logger'
  | 'store'
  | 'versions'
  | 'deadLetter'
  | 'limits'
  | 'values'
  | 'maxDeliver'
  | 'signals'
  | 'stopping'
  | 'queued'
  | 'clock'
  | 'events'
  | 'finalEvents'
>;

/** Reads a delivered message and the task's record: what this delivery is, and what to do with it. */
export async function triage(services: TriageServices, delivery: TaskDelivery): Promise<Triage> {
  const { pipeline, logger, store } = services;
  // Shutting down: leave the task to the next coordinator rather than start it here.
  if (services.stopping()) return { next: 'handBack' };
  const parsed = parseTask(services, delivery.data);
  if (!parsed.ok) return refuse(services, delivery, parsed, { taskId: idFromHeader(delivery) });
  const submission = parsed.value;
  const taskId = submission.id ?? idFromHeader(delivery) ?? derivedId(delivery);
  logMessage(logger, services.bus.messageLogLevel, 'in', delivery.subject, {
    taskId,
    from: 'user',
    to: pipeline,
    kind: 'task',
  });
  if (services.signals.has(taskId)) return { next: 'leave' }; // a redelivery of a task this process is still running
  // A first delivery is almost always a new task: its claim creates the record, and reads it only when that finds
  // one (a resubmitted id, or this very claim whose reply was lost), which saves a round trip on each new task.
  const entry = delivery.deliveryCount > 1 ? await store.get(taskId) : undefined;
  if (entry && entry.value.streamSequence !== delivery.streamSequence) {
    logger.warn(
      { taskId, pipeline, first: entry.value.streamSequence, again: delivery.streamSequence },
      'task id already submitted; ignoring the resubmission',
    );
    // The resubmission's mark, or the ended task's: nothing is left to take it. A running task's claim takes its own.
    if (entry.value.status !== 'running') await dropMark(services, delivery, taskId);
    return { next: 'ack' };
  }
  if (entry && entry.value.status !== 'running') {
    // Delivered again after the end: the coordinator that ended it may have died before its final event
    // went out (it is acknowledged only after). Publishing the stored one again is harmless: same id. So is
    // storing a dead letter again (same message id), in case that was what the crash cut short.
    const final = entry.value.final;
    if (final?.kind === 'task.failed' && final.data.reason === 'max_deliveries') {
      await services.deadLetter(
        pipeline,
        { ...delivery, deliveries: delivery.deliveryCount },
        { taskId, message: final.data.message },
      );
    }
    return final ? { next: 'conclude', final } : { next: 'ack' };
  }
  // Checked after the finished and duplicate cases, so only a task that would run again is given up on. A task
  // never recorded died before its claim: every delivery of it so far made no progress.
  const stalls = entry ? stallsSoFar(entry.value) : delivery.deliveryCount - 1;
  // A mark that cannot be read throws, and the delivery comes back (counted as a stall), except for a task given up
  // on now: it ends all the same (KV `queued` may be gone for good), its mark deleted if it can be.
  const queued = await readMark(services, delivery, taskId).catch((error: unknown) => {
    if (stalls < services.maxDeliver) throw error;
    logger.warn(
      { err: error, taskId },
      `cannot read the mark of task ${taskId} in KV queued; giving up on it`,
    );
    return undefined;
  });
  const task: TriagedTask = { delivery, taskId, submission, entry, stalls, ...(queued ? { queued } : {}) };
  // Cancelled while it waited in the stream: ended here, before any claim, so none of its steps runs.
  const cancelled = entry ? undefined : await endCancelledWhileQueued(services, task);
  if (cancelled) return cancelled;
  if (stalls >= services.maxDeliver) return { next: 'giveUp', task };
  // A task that resumes from a checkpoint has its input there (cut, with where the whole is): nothing to read.
  if (!submission.inputRef || entry?.value.snapshot !== undefined) return toClaim(services, task);
  // An input too large for the message: read whole from where its submitter stored it. A store out of reach
  // throws, and the delivery comes back (each one counted as a stall, so one never readable ends dead-lettered).
  const stored = services.values
    ? await readStoredInput(services.values, pipeline, taskId, submission.inputRef, services.limits)
    : { ok: false as const, reason: 'this coordinator reads no stored inputs' };
  if (!stored.ok && entry) {
    // Claimed before, never checkpointed: the task is known, so it fails, saying why, rather than vanish.
    return { next: 'claim', task: { ...task, inputProblem: stored.reason } };
  }
  if (!stored.ok) return refuse(services, delivery, { ok: false, reason: stored.reason, issues: [] }, task);
  const { inputRef: _read, ...rest } = submission;
  const whole: TriagedTask = {
    ...task,
    submission: { ...rest, input: stored.input },
    ...(stored.cut ? { inputCut: stored.cut } : {}),
  };
  return toClaim(services, whole);
}

type ParsedTask = ReturnType<typeof parseTask>;

function parseTask({ limits }: Pick<TriageServices, 'limits'>, data: Uint8Array) {
  return parseMessage(TaskSubmission, data, { maxBytes: limits.maxTaskBytes, maxDepth: limits.maxTaskDepth });
}

/**
 * A task to claim, with the version a new one starts on read here, once: read after the delivery, it is at least as
 * new as any the submitter could have seen when it submitted. A new task whose input does not match that version's
 * input schema is refused: it was never meant for this pipeline. Clients check it before they submit; this is for
 * any other NATS publisher.
 */
async function toClaim(services: TriageServices, task: TriagedTask): Promise<Triage> {
  if (task.entry) return { next: 'claim', task };
  // A restart or fork runs on its origin's version, whose schema its claim checks the input against.
  const origin = task.submission.origin;
  if (origin !== undefined && !origin.newest) return { next: 'claim', task };
  const newest = await services.versions.newest();
  const schema = newest.config.input;
  const fits = schema === undefined ? undefined : checkTaskInput(schema, task.submission.input);
  if (fits === undefined || fits.ok) return { next: 'claim', task: { ...task, newest } };
  return refuse(services, task.delivery, { ok: false, reason: fits.reason, issues: fits.issues }, task);
}

/**
 * Refuses a payload that is not a task, once: reported on `_invalid`, and terminated, never delivered again. One its
 * submitter marked queued is known by its id: it ends failed (`refused`) with the reason, its mark deleted.
 */
async function refuse(
  services: TriageServices,
  delivery: TaskDelivery,
  parsed: Extract<ParsedTask, { ok: false }>,
  task: { taskId: string | undefined; submission?: TaskSubmission; queued?: KvEntry<QueuedTask> },
): Promise<Triage> {
  const reason = report(services, delivery, parsed);
  const { submission } = task;
  const ended = await endRefusedQueued(
    services,
    delivery,
    {
      taskId: task.taskId,
      ...(submission ? { goal: submission.goal } : {}),
      ...(submission?.metadata ? { metadata: submission.metadata } : {}),
    },
    reason,
    task.queued,
  );
  return ended ?? { next: 'refuse' };
}

/** Reports a refused payload on `_invalid`, and says why it was refused. */
function report(
  { pipeline, bus, logger }: Pick<TriageServices, 'pipeline' | 'bus' | 'logger'>,
  delivery: TaskDelivery,
  parsed: Extract<ParsedTask, { ok: false }>,
): string {
  const hint =
    parsed.limit === undefined ? '' : ` (raise the limit with troupe up ${LIMIT_FLAGS[parsed.limit]})`;
  const reason = `task for pipeline ${pipeline} refused: ${parsed.reason}${hint}`;
  logger.warn({ subject: delivery.subject, streamSequence: delivery.streamSequence }, reason);
  try {
    bus.reportInvalid({
      subject: delivery.subject,
      reporter: 'coordinator',
      reason,
      issues: parsed.issues,
      payload: new TextDecoder().decode(delivery.data.slice(0, 2_000)),
      pipeline,
    });
  } catch (error) {
    logger.error({ err: error }, 'cannot report the refused task');
  }
  return reason;
}

/**
 * Deliveries in a row that ended without progress, counting the last one: it made none when the record's progress
 * has not moved since it claimed the task, unless it was handed back at a clean shutdown.
 */
export function stallsSoFar(record: WorkflowRecord): number {
  const last = record.delivery;
  // Written before deliveries were tracked: count what the old record knew, the deliveries are unknown.
  if (last === undefined) return 0;
  if ((record.progress ?? 0) > last.progress) return 0;
  return last.handedBack ? last.stalls : last.stalls + 1;
}

/** `Nats-Msg-Id` doubles as the task id when the payload has none, so `nats pub -H Nats-Msg-Id:…` works. */
function idFromHeader(message: { headers: Record<string, string> }): string | undefined {
  const id = message.headers['Nats-Msg-Id'];
  return id !== undefined && isTaskId(id) ? id : undefined;
}

/** Deterministic for a stored message, so every redelivery of it gets the same id. */
function derivedId(message: { streamSequence: number; storedAt: number }): string {
  return `t${message.streamSequence}-${message.storedAt.toString(36)}`;
}
