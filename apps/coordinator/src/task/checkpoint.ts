import type { StepActivity, TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { ClaimedTask } from '../intake/claim.ts';
import { activeSteps, stepsAtWork } from '../workflow/compileFlow.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import { endedTask } from '../workflow/workflowTypes.ts';
import type { FinalEvents } from './finalEvents.ts';
import { recordOf } from './taskRecord.ts';
import { isoNow, type TaskServices } from './taskServices.ts';
import type { WorkflowSnapshot } from './workflowChild.ts';

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
  });
  return { record, parked, ...(final ? { final } : {}) };
}
