import { randomUUID } from 'node:crypto';
import { takeQueued, workspaceOnVersion } from '@troupe/client';
import {
  checkTaskInput,
  emptyUsage,
  errorMessage,
  originRef,
  type StepActivity,
  type WorkflowRecord,
} from '@troupe/protocol';
import type { EventScope } from '@troupe/runtime';
import { sameActivity } from '../task/checkpoint.ts';
import { isoNow, publishSafely, type TaskServices } from '../task/taskServices.ts';
import type { SteeringFields } from '../task/taskSteering.ts';
import { checkpointMisfit } from '../task/workflowChild.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import type { WorkflowInput } from '../workflow/workflowTypes.ts';
import { claimOrigin } from './originClaim.ts';
import { dropMark } from './queuedMark.ts';
import type { TaskDelivery } from './taskQueue.ts';
import { childTraceparent, traceOf } from './taskTrace.ts';
import type { TriagedTask } from './triage.ts';

/** A delivery's claim on its task: its token, the record revision it last wrote, and its delivery's progress mark. */
export interface Lease {
  token: string;
  revision: number;
  delivery: { progress: number; stalls: number };
}

/** A task claimed for this delivery: what its workflow starts from. */
export interface ClaimedTask {
  delivery: TaskDelivery;
  /** The task's first delivery, which created its record: none of its steps can have run before. */
  firstDelivery: boolean;
  /** Its record was there before this claim: the run resumes the task, from its snapshot or, with none, its start. */
  resumes: boolean;
  /**
   * The record as this claim left it, when it already says all the checkpoint entering the task's first step would
   * (a new task, no restart or fork, whose first step is an agent's, named at work): that checkpoint adds only the
   * workflow's first snapshot, which a run with none makes again the same, so it is not written. Let go once that
   * checkpoint is made (see {@link startedFrom}).
   */
  record?: WorkflowRecord | undefined;
  input: WorkflowInput;
  scope: EventScope;
  createdAt: string;
  /** The workflow's persisted snapshot it resumes from, if it ran before; let go once its first checkpoint is made. */
  snapshot: unknown;
  lease: Lease;
  /** The hash of the pipeline version the task runs on; absent for a task from before versions were kept. */
  version?: string;
  /**
   * Why the task is cancelled as soon as it runs, before any step: a sub-task whose parent task ended while it waited,
   * or a task cancelled while it was queued (the reason its cancel gave).
   */
  orphaned?: string;
  /** What people did to the task while it ran before (held, told): its record's steering, restored by the run. */
  steering?: SteeringFields;
}

/**
 * The task's workflow has started from its claim and made its first checkpoint: what the claim read for those only
 * (the snapshot it resumed from, the record as claimed) is let go, not kept through the run nor while it sleeps.
 */
export function startedFrom(claimed: ClaimedTask): void {
  claimed.snapshot = undefined;
  claimed.record = undefined;
}

/** How a claim went. */
export type Claim =
  /** The task's workflow runs, on `flow`. */
  | { next: 'run'; claimed: ClaimedTask; flow: FlowVersion }
  /** Claimed, but it cannot run (its version is gone, its input unreadable, its checkpoint unfit): it fails, saying so. */
  | { next: 'fail'; claimed: ClaimedTask; message: string }
  /** A resubmission of a task id another message took: nothing to do. */
  | { next: 'ack' }
  /** Lost a race for the record, or this process is stopping: to be delivered again. */
  | { next: 'handBack' };

export type ClaimServices = Pick<
  TaskServices,
  | 'pipeline'
  | 'store'
  | 'clock'
  | 'logger'
  | 'bus'
  | 'events'
  | 'versions'
  | 'stopping'
  | 'queued'
  | 'taskEvents'
  | 'values'
>;

/** Claims the task in its record for this delivery (or creates the record), with what its workflow starts from. */
export async function claim(services: ClaimServices, task: TriagedTask): Promise<Claim> {
  const { pipeline, store, logger, versions, clock } = services;
  const { delivery, taskId, submission, entry: existing, stalls, inputCut, inputProblem } = task;
  const parent = submission.parent;
  // A restart or fork reads what it reuses from its origin until its first checkpoint holds it (originClaim.ts).
  const origin =
    submission.origin && existing?.value.snapshot === undefined
      ? await claimOrigin(services, submission.origin, { ...submission, inputCut })
      : undefined;
  // What the fork changed, as its claim found it (whatever its submitter said): in its record, events and trace. A
  // task resumed from a checkpoint claims no origin again: its record keeps what its first claim found.
  const found = origin?.ok ? origin.edited : existing?.value.origin?.edited;
  const taskOrigin = submission.origin && found ? { ...submission.origin, edited: found } : submission.origin;
  // A task runs on the version it started on (or was migrated to); a new one on the newest (as triage read it, its
  // input checked against it), a restart or fork on its origin's.
  const onOriginVersion = origin !== undefined && !(origin.ok && origin.version === undefined);
  const started = existing || onOriginVersion ? undefined : (task.newest ?? (await versions.newest()));
  const version = existing
    ? existing.value.version
    : origin?.ok && onOriginVersion
      ? origin.version
      : started?.hash;
  const resolved =
    inputProblem ??
    (origin?.ok === false ? origin.problem : undefined) ??
    started ??
    (await versions.flowFor(version));
  // A restart or fork on its origin's version: its input is checked against that version's schema here (triage
  // checked a new task's against the newest's).
  const fits =
    onOriginVersion && !existing && typeof resolved !== 'string' && resolved.config.input !== undefined
      ? checkTaskInput(resolved.config.input, submission.input)
      : undefined;
  const flow =
    fits?.ok === false ? `its input does not fit its version's input schema: ${fits.reason}` : resolved;
  // A restart's or fork's workspace: its origin's files as its step first started there, when both hand files on.
  const carried =
    origin?.ok && submission.origin && typeof flow !== 'string'
      ? workspaceOnVersion(origin.workspace, submission.origin, flow.config.workspace?.handOff === true)
      : undefined;
  const input: WorkflowInput = {
    taskId,
    pipeline,
    goal: submission.goal,
    ...(submission.input ? { input: submission.input } : {}),
    ...(inputCut ? { inputCut } : {}),
    ...(submission.metadata ? { metadata: submission.metadata } : {}),
    // A sub-task's trace continues its parent's.
    traceparent: existing
      ? traceOf(existing.value.snapshot, existing.value.traceparent)
      : childTraceparent(parent?.traceparent),
    ...(typeof flow === 'string' ? {} : deadlineOf(services, flow, existing?.value.createdAt)),
    ...(parent ? { parent } : {}),
    ...(taskOrigin ? { origin: originRef(taskOrigin) } : {}),
    ...(origin?.ok ? { reuse: origin.reuse } : {}),
    ...(carried?.manifest ? { workspace: carried.manifest } : {}),
  };

  const scope: EventScope = { pipeline, taskId, traceparent: input.traceparent };
  const createdAt = existing?.value.createdAt ?? isoNow(clock);
  const progress = existing?.value.progress ?? 0;
  const lease: Lease = { token: randomUUID(), revision: 0, delivery: { progress, stalls } };
  // The first step at work, named on the record from the claim on: its first checkpoint need not say it.
  const firstStep = typeof flow === 'string' || input.origin ? undefined : firstAgentStep(flow, createdAt);
  let record: WorkflowRecord | undefined;
  if (existing) {
    record = {
      ...existing.value,
      lease: lease.token,
      delivery: lease.delivery,
      updatedAt: isoNow(clock),
      // Kept until a checkpoint holds it in the snapshot, for a run resumed before one.
      ...(existing.value.snapshot === undefined ? { traceparent: input.traceparent } : {}),
    };
    const took = await store.update(taskId, record, existing.revision);
    if (took === undefined) {
      // Another coordinator wrote the record meanwhile: let this delivery come back, and look again then.
      logger.warn({ taskId }, 'task record changed while resuming it; handing the delivery back');
      return { next: 'handBack' };
    }
    lease.revision = took;
  } else {
    record = {
      taskId,
      pipeline,
      streamSequence: delivery.streamSequence,
      status: 'running',
      state: (typeof flow === 'string' ? undefined : flow.config.flow[0]?.id) ?? 'completed',
      ...(version === undefined ? {} : { version }),
      ...(input.origin ? { origin: input.origin } : {}),
      goal: input.goal,
      ...(submission.metadata ? { metadata: submission.metadata } : {}),
      round: 1,
      usage: emptyUsage(),
      createdAt,
      updatedAt: isoNow(clock),
      lease: lease.token,
      progress,
      delivery: lease.delivery,
      ...(firstStep ? { activity: firstStep } : {}),
      traceparent: input.traceparent,
    };
    const claimed = await store.create(taskId, record);
    // Absent: the key existed. Ours (same stream message, our write seen as failed) goes on; another's is a duplicate.
    const owner = claimed === undefined ? await store.get(taskId) : undefined;
    if (claimed === undefined && owner?.value.streamSequence !== delivery.streamSequence) {
      logger.warn(
        { taskId, pipeline, first: owner?.value.streamSequence, again: delivery.streamSequence },
        'task id already submitted; ignoring the resubmission',
      );
      // The resubmission's mark, or the ended task's: nothing is left to take it. A running task's claim takes its own.
      if (owner && owner.value.status !== 'running') await dropMark(services, delivery, taskId, task.queued);
      return { next: 'ack' };
    }
    // Ours, with its reply lost: it bears another run's token only if that run took it over since.
    if (claimed === undefined && owner?.value.lease !== lease.token) return { next: 'handBack' };
    lease.revision = claimed ?? owner?.revision ?? 0;
    announce(
      services,
      scope,
      {
        ...task,
        submission: { ...submission, ...(taskOrigin ? { origin: taskOrigin } : {}) },
      },
      carried && {
        files: carried.files,
        bytes: carried.bytes,
        ...(carried.note ? { note: carried.note } : {}),
      },
    );
    if (carried?.note) logger.info({ taskId, origin: submission.origin?.taskId }, carried.note);
  }
  if (services.stopping()) {
    // The runner's stop began while this delivery was being claimed: leave it to the next coordinator.
    await markHandedBack(services, taskId, lease);
    return { next: 'handBack' };
  }
  // Taken only now that the record is this claim's: a cancel written to the mark before this is honoured, and one
  // asked after it finds the record and goes to this coordinator.
  const queuedCancel =
    services.queued && task.queued
      ? (await takeQueued(services.queued, taskId, isoNow(clock), task.queued)).cancel
      : undefined;
  const orphaned = queuedCancel ?? (parent ? await parentEnded(services, parent.taskId) : undefined);
  const claimed: ClaimedTask = {
    delivery,
    firstDelivery: existing === undefined && delivery.deliveryCount === 1,
    resumes: existing !== undefined,
    ...(firstStep && record.snapshot === undefined && sameActivity(record.activity, firstStep)
      ? { record }
      : {}),
    input,
    scope,
    createdAt,
    snapshot: existing?.value.snapshot,
    lease,
    ...(version === undefined ? {} : { version }),
    ...(orphaned === undefined ? {} : { orphaned }),
    ...(existing ? { steering: steeringOfRecord(existing.value) } : {}),
  };
  if (typeof flow === 'string')
    return {
      next: 'fail',
      claimed,
      message: `task ${taskId} cannot ${existing ? 'resume' : 'start'}: ${flow}`,
    };
  const misfit =
    claimed.snapshot === undefined ? undefined : checkpointMisfit(flow.machine, input, claimed.snapshot);
  if (misfit === undefined) return { next: 'run', claimed, flow };
  const loaded =
    version === undefined
      ? `pipeline ${pipeline} as loaded now`
      : `version ${version.slice(0, 12)} of pipeline ${pipeline}`;
  return {
    next: 'fail',
    claimed,
    message: `task ${taskId} cannot resume: its checkpoint does not fit ${loaded} (${errorMessage(misfit.error)})`,
  };
}

/** The task's first step, when it is an agent's, as at work from the task's acceptance. */
function firstAgentStep(flow: FlowVersion, createdAt: string): StepActivity | undefined {
  const first = flow.config.flow[0];
  const agent = first?.kind === 'agent' ? flow.agentOfStep.get(first.id) : undefined;
  return first && agent !== undefined
    ? { kind: 'agent', step: first.id, agent, since: createdAt }
    : undefined;
}

/** A record's steering fields, those it has. */
function steeringOfRecord({
  paused,
  pausedMs,
  told,
  toldCount,
  toldKeys,
  toldOwed,
}: WorkflowRecord): SteeringFields {
  return {
    ...(paused === undefined ? {} : { paused }),
    ...(pausedMs === undefined ? {} : { pausedMs }),
    ...(told === undefined ? {} : { told }),
    ...(toldCount === undefined ? {} : { toldCount }),
    ...(toldKeys === undefined ? {} : { toldKeys }),
    ...(toldOwed === undefined ? {} : { toldOwed }),
  };
}

/** The task's wall-clock deadline, counted from its acceptance (first delivery), when its version sets one. */
function deadlineOf(
  { clock }: Pick<ClaimServices, 'clock'>,
  flow: FlowVersion,
  createdAt: string | undefined,
): { deadline?: number } {
  const timeout = flow.config.budget?.timeout;
  if (timeout === undefined) return {};
  const accepted = createdAt === undefined ? clock.now() : Date.parse(createdAt);
  return { deadline: accepted + timeout * 1_000 };
}

/** How a sub-task's parent task ended, when it has (undefined while it runs, or when its record cannot be read). */
async function parentEnded(
  { store }: Pick<ClaimServices, 'store'>,
  parent: string,
): Promise<string | undefined> {
  const record = (await store.get(parent).catch(() => undefined))?.value;
  return record && record.status !== 'running' ? `its parent task ${parent} ${record.status}` : undefined;
}

/** A new task's `task.accepted`. */
export function announce(
  services: Pick<ClaimServices, 'bus' | 'logger' | 'events'>,
  scope: EventScope,
  { submission, inputCut }: TriagedTask,
  /** A restart's or fork's workspace as it starts: what it carries from its origin, or why nothing. */
  workspace?: { files: number; bytes: number; note?: string },
): void {
  const { parent, origin } = submission;
  publishSafely(services, scope.taskId, () =>
    services.events.make(
      'task.accepted',
      scope,
      {
        goal: submission.goal,
        ...(submission.input ? { input: submission.input } : {}),
        ...(inputCut ? { inputCut } : {}),
        ...(submission.metadata ? { metadata: submission.metadata } : {}),
        ...(parent
          ? {
              parent: {
                taskId: parent.taskId,
                pipeline: parent.pipeline,
                step: parent.step,
                depth: parent.depth,
              },
            }
          : {}),
        ...(origin ? { origin: originRef(origin) } : {}),
        ...(workspace ? { workspace } : {}),
      },
      { from: parent ? `task:${parent.taskId}` : 'user', to: scope.pipeline },
    ),
  );
}

/** Marks a just-claimed task handed back (not a stall), when the record is still this claim's. */
async function markHandedBack(
  { store }: Pick<ClaimServices, 'store'>,
  taskId: string,
  lease: Lease,
): Promise<void> {
  const claimed = await store.get(taskId).catch(() => undefined);
  if (claimed?.value.lease !== lease.token) return;
  await store
    .update(taskId, { ...claimed.value, delivery: { ...lease.delivery, handedBack: true } }, claimed.revision)
    .catch(() => undefined);
}
