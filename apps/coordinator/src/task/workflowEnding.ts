import { errorMessage, type TroupeEvent, type UsageTotals } from '@troupe/protocol';
import { endSpan, type TraceSpan } from '@troupe/runtime';
import type { ClaimedTask } from '../intake/claim.ts';
import type { ReleaseReason, TaskOutput } from '../workflow/workflowTypes.ts';
import { fencedWrite, type LeaseMark, recordFailure, recordHandBack, recordOf } from './taskRecord.ts';
import type { TaskServices } from './taskServices.ts';

/** How the workflow's time in this process ended. Whichever comes first counts; the others find it ending already. */
export type WorkflowEnding =
  | { kind: 'done'; output: TaskOutput }
  /** This process is shutting down: the task is handed back to be resumed elsewhere. */
  | { kind: 'stopped' }
  /** Moved to another version of its pipeline (`troupe migrate`): handed back, to resume on that version. */
  | { kind: 'migrated'; version: string }
  /** Another coordinator owns the task now; this delivery leaves it alone. */
  | { kind: 'takenOver' }
  /** A fault while running the task (not while running a step): the task fails with `reason`. */
  | { kind: 'crashed'; reason: 'internal' | 'checkpoint_failed'; message: string; error: unknown };

/** What the workflow is told when it is let go from outside. */
export const RELEASES: Record<Exclude<WorkflowEnding, { kind: 'done' }>['kind'], ReleaseReason> = {
  stopped: 'shutdown',
  // As at a shutdown: what the step waits on (a person's answer, a sub-task) stays, for the run that resumes it.
  migrated: 'shutdown',
  takenOver: 'takenOver',
  crashed: 'checkpointFailed',
};

/**
 * What the delivery does once its workflow's time here has ended. To conclude, `askedNobody` when the task ran whole
 * in this delivery and none of its steps may have asked a person (see `conclude.ts`).
 */
export type AfterWorkflow =
  | { next: 'conclude'; final: TroupeEvent; askedNobody?: true }
  | { next: 'handBack' }
  | { next: 'leave' };

/** The facts of the workflow's time here that its ending is recorded from. */
export interface EndedHere {
  claimed: ClaimedTask;
  ending: WorkflowEnding;
  lease: LeaseMark;
  progress: number;
  /** Another coordinator took the task over meanwhile. */
  lost: boolean;
  /** The record with the final status and event is stored. */
  finalWritten: boolean;
  final: TroupeEvent | undefined;
  /** The workflow's totals as last seen. */
  totals: { usage: UsageTotals; round: number };
  /** Told whether the version a migration let the workflow go for was recorded. */
  migrated?: (recorded: boolean) => void;
}

type EndingServices = Pick<TaskServices, 'store' | 'clock' | 'logger' | 'finalEvents' | 'bus'>;

/**
 * Records how the workflow's time here ended, once its checkpoints are written: the ending of a task the workflow
 * ended (when its last checkpoint did not carry it), a hand-back, a move to another version, or a failure of ours.
 */
export async function recordWorkflowEnding(
  services: EndingServices,
  ended: EndedHere,
): Promise<AfterWorkflow> {
  const { logger, clock, finalEvents } = services;
  const { claimed, ending, lease } = ended;
  const { taskId } = claimed.input;
  // Another coordinator runs the task now: it publishes, acks or hands back; this one leaves it alone.
  if (ended.lost || ending.kind === 'takenOver') return { next: 'leave' };
  // Measured from acceptance, so a resumed task reports its whole life.
  const durationMs = Math.max(0, clock.now() - Date.parse(claimed.createdAt));
  switch (ending.kind) {
    case 'done': {
      const final = ended.final ?? finalEvents.final(claimed.scope, ending.output, durationMs);
      // The last checkpoint did not land (it was too big, say): the ending is recorded without the snapshot.
      if (!ended.finalWritten && !(await recordTaskEnding(services, ended, ending.output, final)))
        return { next: 'leave' };
      // Nothing of a first delivery ran before it, and its workflow saw every step of it end: it knows whether one
      // may have asked a person. A resumed or redelivered task cannot know what an earlier run asked.
      const askedNobody = claimed.firstDelivery && ending.output.askedPeople !== true;
      return { next: 'conclude', final, ...(askedNobody ? { askedNobody } : {}) };
    }
    case 'stopped':
      await recordHandBack(services, taskId, lease);
      return { next: 'handBack' };
    case 'migrated': {
      const recorded = await recordHandBack(services, taskId, lease, ending.version);
      ended.migrated?.(recorded);
      const version = ending.version.slice(0, 12);
      if (recorded)
        logger.info({ taskId, version: ending.version }, `task ${taskId} moved to version ${version}`);
      else {
        // Taken over meanwhile, or NATS out of reach past every retry: the record still names the old version.
        logger.error(
          { taskId, version: ending.version },
          `task ${taskId} was let go to move to version ${version}, but its record could not be written; it resumes on the version it ran on`,
        );
      }
      return { next: 'handBack' };
    }
    case 'crashed': {
      // A fault of ours or of the task's data, not of the network: retrying would fail again.
      logger.error({ err: ending.error, taskId }, ending.message);
      const { usage } = ended.totals;
      const failed = finalEvents.failed(claimed.scope, ending.reason, ending.message, usage, durationMs);
      return (await recordFailure(services, claimed, lease, ended.progress, failed, ended.totals))
        ? { next: 'conclude', final: failed }
        : { next: 'leave' };
    }
  }
}

/**
 * Writes the ending of a workflow that completed or failed without its snapshot, when the checkpoint with it did
 * not land. False when it cannot be written either: the message is then left to be delivered again.
 */
async function recordTaskEnding(
  services: EndingServices,
  ended: EndedHere,
  output: TaskOutput,
  final: TroupeEvent,
): Promise<boolean> {
  const { taskId } = ended.claimed.input;
  const record = recordOf(services, ended.claimed, ended.progress, {
    status: output.status,
    state: output.status,
    round: ended.totals.round,
    usage: ended.totals.usage,
    final,
  });
  return fencedWrite(services, taskId, ended.lease, record).then(
    (write) => write.written,
    (error: unknown) => {
      services.logger.error(
        { err: error, taskId },
        `cannot record that task ${taskId} ${output.status}; it will run again`,
      );
      return false;
    },
  );
}

/** Ends the workflow's span with how its time here ended: the task's status, or why it was let go. */
export function endWorkflowSpan(span: TraceSpan, ending: WorkflowEnding | undefined): void {
  if (ending?.kind === 'done') {
    const { status, failure } = ending.output;
    endSpan(span, failure ? { type: failure.reason, message: failure.message } : undefined, {
      'troupe.task.status': status,
      'troupe.rounds': ending.output.rounds,
    });
    return;
  }
  if (ending?.kind === 'crashed') {
    endSpan(span, { type: ending.reason, message: ending.message }, { 'troupe.task.status': 'failed' });
    return;
  }
  // Let go: the task goes on in another run (or was never run here).
  endSpan(span, undefined, { 'troupe.run.released': ending?.kind ?? 'unknown' });
}

/** The message of a workflow that crashed (threw outside a step). */
export function crashMessage(error: unknown): string {
  return `the workflow actor crashed: ${errorMessage(error)}`;
}
