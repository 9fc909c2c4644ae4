import { isDeepStrictEqual } from 'node:util';
import type { StepActivity, TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { ClaimedTask } from '../intake/claim.ts';
import { activeSteps, stepsAtWork } from '../workflow/compileFlow.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import { endedTask } from '../workflow/workflowTypes.ts';
import type { FinalEvents } from './finalEvents.ts';
import { recordOf } from './taskRecord.ts';
import { isoNow, type TaskServices } from './taskServices.ts';
import type { SteeringFields, TaskSteering } from './taskSteering.ts';
import { type WorkflowSnapshot, workflowChildLogic } from './workflowChild.ts';

/*
 * A task's checkpoints, from the workflow's snapshot to the record to write: made ({@link takeCheckpoint}, which
 * builds the record with {@link checkpointOf}) beside the notes of what its steps are doing ({@link noteActivity}).
 * The task's {@link CheckpointWriter} (`checkpointWriter.ts`) applies what these return and writes the records.
 */

/**
 * What a task's checkpoints are made against, as its writer keeps it: the task, the lease's revision last written,
 * the progress mark, the record as last made, and the final event once made.
 */
export interface Ledger {
  claimed: ClaimedTask;
  flow: FlowVersion;
  revision: number;
  progress: number;
  /** The first checkpoint rewrites the one the task resumed from; each later one records a transition. */
  firstCheckpoint: boolean;
  /** The record as this delivery last wrote it, or is about to. */
  latest?: WorkflowRecord;
  final?: TroupeEvent;
  finalWritten: boolean;
  /** Another coordinator took the task over: nothing more is written. */
  lost: boolean;
  /** What people did to the task (pause, tell): every record written says it as it is when the record is made. */
  steering?: TaskSteering;
}

/** A record write waiting its turn, and what its failure means: a lost checkpoint, or only a lost activity note. */
export interface PendingWrite {
  record: WorkflowRecord;
  of: 'checkpoint' | 'activity' | 'steering';
  /** Told whether it was written (a pause or a tell is answered only once it is). */
  done?: (written: boolean) => void;
}

/** What a snapshot of the workflow makes: nothing to write, a checkpoint to write, or a task that fails. */
export type TakenCheckpoint =
  | { kind: 'none' }
  | { kind: 'poisoned'; error: unknown }
  /**
   * The ledger with the checkpoint made; its write; whether the task now holds no working slot; its first since a
   * resume; and whether the record as claimed says all it does but the snapshot (`needless`: see `ClaimedTask.record`).
   */
  | {
      kind: 'queued';
      ledger: Ledger;
      write: PendingWrite;
      parked: boolean;
      resumed: boolean;
      needless: boolean;
    };

/**
 * The checkpoint of a workflow snapshot, to be written. None once the task is lost to another coordinator, or
 * when the workflow was let go by an ending from outside (shutdown, takeover, …): its last checkpoint stands, for
 * the next run. A snapshot that cannot be persisted (nested too deep, say) fails only this task.
 */
export function takeCheckpoint(
  services: Pick<TaskServices, 'clock'> & { finalEvents: FinalEvents },
  ledger: Ledger,
  snapshot: WorkflowSnapshot,
): TakenCheckpoint {
  if (snapshot.status === 'done' && !endedTask(snapshot.output)) return { kind: 'none' };
  if (ledger.lost) return { kind: 'none' };
  // The first checkpoint rewrites the one the task resumed from; each later one records a transition.
  const progress = ledger.firstCheckpoint ? ledger.progress : ledger.progress + 1;
  let made: Checkpoint;
  try {
    const persisted = workflowChildLogic.getPersistedSnapshot(snapshot);
    made = checkpointOf(
      services,
      ledger.claimed,
      ledger.flow,
      { snapshot, persisted },
      { progress, latest: ledger.latest, final: ledger.final },
      ledger.steering?.fields(),
    );
  } catch (error) {
    return { kind: 'poisoned', error };
  }
  return {
    kind: 'queued',
    parked: made.parked,
    resumed: ledger.firstCheckpoint && ledger.claimed.resumes,
    needless: ledger.firstCheckpoint && addsOnlySnapshot(ledger.claimed.record, made.record),
    ledger: {
      ...ledger,
      progress,
      firstCheckpoint: false,
      latest: made.record,
      ...(made.final ? { final: made.final } : {}),
    },
    write: { record: made.record, of: 'checkpoint' },
  };
}

/**
 * The ledger with what the current step is doing noted in the record, and its write, or undefined when the record already says so
 * (the checkpoint that entered the step names its agent: the first heartbeat adds nothing) or is no longer ours.
 */
export function noteActivity(
  { clock }: Pick<TaskServices, 'clock'>,
  ledger: Ledger,
  activity: StepActivity,
): { ledger: Ledger; write: PendingWrite } | undefined {
  const latest = ledger.latest;
  if (ledger.lost || latest?.status !== 'running' || sameActivity(latest.activity, activity))
    return undefined;
  const record: WorkflowRecord = { ...latest, activity, updatedAt: isoNow(clock) };
  return { ledger: { ...ledger, latest: record }, write: { record, of: 'activity' } };
}

/**
 * Whether a checkpoint says nothing the record as claimed does not, but the workflow's snapshot (and when it was
 * written, and since when its step is at work): the first one of a new task entering its first step.
 */
function addsOnlySnapshot(claimed: WorkflowRecord | undefined, made: WorkflowRecord): boolean {
  if (claimed === undefined || claimed.activity === undefined || made.activity === undefined) return false;
  const { snapshot: _snapshot, updatedAt: _at, activity, ...rest } = made;
  // The claim's trace context is in the snapshot from here on.
  const { updatedAt: _claimedAt, activity: claimedActivity, traceparent: _trace, ...claimedRest } = claimed;
  return sameActivity(claimedActivity, activity) && isDeepStrictEqual(rest, claimedRest);
}

/** An ended task is held by nobody: what was told and how long it was held stay on its record. */
function unheld({ paused: _, toldOwed, told, ...rest }: SteeringFields): SteeringFields {
  // No step is at work any more: a message some step read is read (its other branches ended without it), so the
  // record keeps only those nobody read. A parent's `pipeline` step counts a message its sub-task's final record
  // keeps as unread, and would give it to its next step again.
  const read = new Set((toldOwed ?? []).map(({ messageId }) => messageId));
  const unread = (told ?? []).filter(({ id }) => !read.has(id));
  return { ...rest, ...(unread.length > 0 ? { told: unread } : {}) };
}

/** Whether a step's activity is the one already recorded (its `since` aside). */
export function sameActivity(recorded: StepActivity | undefined, next: StepActivity): boolean {
  if (recorded?.kind !== next.kind || recorded.step !== next.step || recorded.agent !== next.agent)
    return false;
  return recorded.kind !== 'person' || next.kind !== 'person' || recorded.request.id === next.request.id;
}

/** A checkpoint of the workflow: the record to write, and whether the task holds no working slot now. */
export interface Checkpoint {
  record: WorkflowRecord;
  /** Its every step at work waits on a person or a sub-task: its working slot goes to another task meanwhile. */
  parked: boolean;
  /** The task's final event, in the same write as its final status, so no crash can separate them. */
  final?: TroupeEvent;
}

/**
 * The record of a workflow's transition: where it is (`state`, its persisted `snapshot`), its totals, what it is
 * doing (for `troupe status`), and its status and final event once it has ended the task. The `snapshot` field is
 * exactly the workflow's persisted snapshot, as every coordinator version reads and writes it.
 */
export function checkpointOf(
  services: Pick<TaskServices, 'clock'> & { finalEvents: FinalEvents },
  claimed: ClaimedTask,
  flow: Pick<FlowVersion, 'agentOfStep' | 'waitingSteps'>,
  taken: { snapshot: WorkflowSnapshot; persisted: unknown },
  before: { progress: number; latest: WorkflowRecord | undefined; final: TroupeEvent | undefined },
  steering: SteeringFields = {},
): Checkpoint {
  const { snapshot } = taken;
  const now = isoNow(services.clock);
  // A foreach step works in its items: the steps they are in.
  const atWork = stepsAtWork(snapshot);
  // A transition: the workflow works again (a step replied), so the task takes a working slot — unless all it
  // does now is wait (on people, or on a sub-task), alone or in every branch or item still going.
  const parked =
    snapshot.status === 'active' && atWork.length > 0 && atWork.every((s) => flow.waitingSteps.has(s));
  const ended = snapshot.status === 'done' && endedTask(snapshot.output) ? snapshot.output : undefined;
  const status = ended?.status ?? 'running';
  const durationMs = Math.max(0, services.clock.now() - Date.parse(claimed.createdAt));
  const final = ended ? services.finalEvents.final(claimed.scope, ended, durationMs) : before.final;
  const { round, usage } = snapshot.context;
  // One of the steps at work, for `troupe status` and the dashboard: the first, when branches run at once.
  const working = status === 'running' ? atWork.find((step) => flow.agentOfStep.has(step)) : undefined;
  const agent = working === undefined ? undefined : flow.agentOfStep.get(working);
  // Waiting on people only: the question their step put keeps being what the task waits on.
  const latest = before.latest;
  const asked = latest?.activity?.kind === 'person' && atWork.includes(latest.activity.step);
  const activity: StepActivity | undefined =
    working !== undefined && agent !== undefined
      ? { kind: 'agent', step: working, agent, since: now }
      : parked && asked
        ? latest?.activity
        : undefined;
  const record = recordOf(services, claimed, before.progress, {
    status,
    state: activeSteps(snapshot.value).join('+'),
    round,
    usage,
    snapshot: taken.persisted,
    final,
    activity,
    ...(status === 'running' ? steering : unheld(steering)),
  });
  return { record, parked, ...(final ? { final } : {}) };
}
