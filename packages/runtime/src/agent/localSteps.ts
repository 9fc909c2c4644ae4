import type { AgentStepReply, AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { HostedAgent } from './remoteAgent.ts';
import { failedReply } from './stepReply.ts';
import type { LocalDelivery } from './stepRequesters.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

/** A step taken in this process: its reply, and its stop. */
export interface LocalStepCall {
  /** Never rejects: a failure is a reply, as over NATS. */
  readonly reply: Promise<AgentStepReply>;
  /**
   * The workflow left the step (cancelled, timed out, its task ended): the run stops as for `aborted` (unless a
   * resend over NATS joined it), and `reply` is an `aborted` failure if it had not settled.
   */
  cancel(): void;
}

/** What a step taken in this process tells its caller while it runs. */
export interface LocalStepHooks {
  /**
   * What a heartbeat would say (whom the step waits on, a model call that lasted), only when it changes: no periodic
   * heartbeat is sent, as the caller is in this process and cannot lose the step's run without losing its own.
   */
  onActivity(heartbeat: StepHeartbeat): void;
}

/**
 * Steps of agents this process serves, run without NATS when a host here has room. A step taken this way goes the
 * same path as one delivered over NATS (`StepsInFlight.take`): it joins a run of the same step id under way, gets
 * a reply given lately, hears the steering it missed, and runs with the same journal, events, budgets, permissions,
 * workspace and time limit. Only the delivery differs: no inbox, no heartbeats.
 */
export interface LocalSteps {
  /**
   * Takes the step here, or returns undefined: no host here serves `request.agent` at `request.version`, or it is
   * full or stopping. The caller then sends the step over NATS, where any worker may take it.
   */
  tryTake(request: AgentStepRequest, hooks: LocalStepHooks): LocalStepCall | undefined;
}

/**
 * Hands `request` to `steps` as a delivery in this process, for `agent`. With `TROUPE_FREEZE_LOCAL=1` (in tests)
 * the request is frozen: the host and the workflow share it, and neither may change it.
 */
export function takeLocally(
  steps: StepsInFlight,
  agent: HostedAgent,
  request: AgentStepRequest,
  hooks: LocalStepHooks,
): LocalStepCall {
  if (process.env.TROUPE_FREEZE_LOCAL === '1') deepFreeze(request);
  let settle: (reply: AgentStepReply) => void = () => {};
  const reply = new Promise<AgentStepReply>((resolve) => (settle = resolve));
  let settled = false;
  const delivery: LocalDelivery = {
    subject: `local:${request.pipeline}.${request.agent}`,
    value: request,
    respond: (payload) => {
      if (settled) return;
      settled = true;
      settle(payload as AgentStepReply);
    },
    activity: (heartbeat) => {
      if (!settled) hooks.onActivity(heartbeat);
    },
  };
  steps.take(delivery, agent);
  return {
    reply,
    cancel: () => {
      if (settled) return;
      steps.leave(delivery);
      delivery.respond(
        failedReply(request.stepId, 'aborted', `step ${request.stepId} was left by its workflow`),
      );
    },
  };
}

function deepFreeze(value: unknown): void {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return;
  Object.freeze(value);
  for (const inner of Object.values(value)) deepFreeze(inner);
}
