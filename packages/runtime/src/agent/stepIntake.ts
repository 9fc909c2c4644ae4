import { AgentStepRequest, subjects } from '@troupe/protocol';
import type { Bus, BusSubscription, Delivery } from '../transport/bus.ts';
import { type AgentVersions, agentForStep, isOwnVersion } from './agentForStep.ts';
import type { HostedAgent } from './remoteAgent.ts';
import { failedReply } from './stepReply.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

/** What a host's intake of steps needs. */
export interface StepIntakeServices extends AgentVersions {
  bus: Bus;
  /** Where the steps taken go. */
  steps: StepsInFlight;
}

/**
 * Serves `troupe.agents.<pipeline>.<name>` in the queue group `troupe-<pipeline>-<name>`, so any number of hosts
 * share its steps. A step for another pipeline or agent is answered `misrouted`; a step of the host's own version
 * goes to `own` at once; another version's agent is found first (see {@link agentForStep}).
 */
export function subscribeStepIntake(
  name: string,
  own: HostedAgent | undefined,
  intake: StepIntakeServices,
): BusSubscription {
  const { bus, pipeline, steps } = intake;
  const subject = subjects.agent(pipeline, name);
  const receive = (delivery: Delivery<AgentStepRequest>): void => {
    const request = delivery.value;
    if (request.pipeline !== pipeline || request.agent !== name) {
      delivery.respond(
        failedReply(
          request.stepId,
          'misrouted',
          `step for ${request.pipeline}/${request.agent} arrived on ${subject}`,
        ),
      );
      return;
    }
    if (own && isOwnVersion(request, intake)) {
      steps.take(delivery, own);
      return;
    }
    void agentForStep(own, name, request, intake).then((found) => {
      if ('stepId' in found) delivery.respond(found);
      else steps.take(delivery, found);
    });
  };
  return bus.subscribe(subject, AgentStepRequest, receive, {
    queue: `troupe-${pipeline}-${name}`,
    reporter: `agent:${pipeline}/${name}`,
    meta: (request) => ({
      taskId: request.taskId,
      from: request.from ?? 'workflow',
      to: request.agent,
      kind: 'agent.step',
    }),
  });
}
