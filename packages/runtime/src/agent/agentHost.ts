import type { ModelResponse } from '@troupe/llm';
import {
  type AgentStepReply,
  AgentStepRequest,
  ControlMessage,
  parseMessage,
  type StepHeartbeat,
  subjects,
} from '@troupe/protocol';
import type { HumanGate } from '../approvals/humanGate.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import { type Clock, type IdGenerator, randomId, systemClock } from '../events/clock.ts';
import { EventFactory } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { KvMemory } from '../memory/memoryStore.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { BusSubscription, NatsBus } from '../transport/natsBus.ts';
import type { AgentDefinition } from './agentDefinition.ts';
import { failedReply, runAgentStep } from './runAgentStep.ts';

/** How many recent step replies a host keeps for resends. */
const RECENT_REPLIES = 1_000;

export interface AgentHostOptions {
  bus: NatsBus;
  pipeline: string;
  agents: readonly AgentDefinition[];
  registry: ToolRegistry;
  workspaceRoot: string;
  logger: Logger;
  clock?: Clock;
  ids?: IdGenerator;
  price?: (provider: string, model: string, response: ModelResponse) => number;
  /** Where `ask` calls and questions go; without it they are denied. */
  human?: HumanGate;
  /** Task and agent memory for the memory tools. */
  memory?: KvMemory;
  /** Records tool calls so a step run again after a crash runs none twice. */
  journal?: StepJournal;
}

/** A running set of agent actors serving their subjects. */
export interface AgentHost {
  /** Steps being worked on now. */
  readonly inFlight: number;
  /** Stops taking steps, aborts the ones in flight and waits for their replies to go out. */
  stop(): Promise<void>;
}

/**
 * Serves `troupe.agents.<pipeline>.<agent>` for each agent, in a queue group, so any number of hosts share
 * the work. Each step request starts an agent actor; its reply goes back to the requester.
 */
export function startAgentHost(options: AgentHostOptions): AgentHost {
  const { bus, pipeline, logger } = options;
  const events = new EventFactory(options.clock ?? systemClock, options.ids ?? randomId);
  const running = new Map<string, { taskId: string; abort: AbortController; done: Promise<void> }>();
  const subscriptions: BusSubscription[] = [];
  /** The reply each step running here will give, by step id. */
  const replies = new Map<string, Promise<AgentStepReply>>();
  /** Replies of steps that ended here lately, for a resend whose first reply was lost; oldest first. */
  const finished = new Map<string, Promise<AgentStepReply>>();
  const remember = (stepId: string, reply: Promise<AgentStepReply>) => {
    finished.set(stepId, reply);
    if (finished.size > RECENT_REPLIES) finished.delete(finished.keys().next().value as string);
  };
  let stopping = false;

  for (const agent of options.agents) {
    const subject = subjects.agent(pipeline, agent.name);
    const subscription = bus.subscribe(
      subject,
      AgentStepRequest,
      (delivery) => {
        const request = delivery.value;
        if (request.pipeline !== pipeline || request.agent !== agent.name) {
          delivery.respond(
            failedReply(
              request.stepId,
              'misrouted',
              `step for ${request.pipeline}/${request.agent} arrived on ${subject}`,
            ),
          );
          return;
        }
        // While the step runs, the requester hears from this host (if it asked to), so it can tell a long step
        // from a dead worker.
        const heartbeat = () =>
          delivery.respond({ stepId: request.stepId, heartbeat: true } satisfies StepHeartbeat, {
            quiet: true,
          });
        const beat =
          request.heartbeatMs === undefined ? undefined : setInterval(heartbeat, request.heartbeatMs);
        // The first at once: the requester learns that a host took the step before its first interval ends.
        if (beat) heartbeat();
        // The same step sent again (its first reply was lost to a reconnect) joins the run already going here,
        // or gets the reply that run gave, rather than running twice.
        const underway = replies.get(request.stepId) ?? finished.get(request.stepId);
        if (underway) {
          void underway.then((reply) => delivery.respond(reply)).finally(() => clearInterval(beat));
          return;
        }
        const abort = new AbortController();
        const key = `${request.stepId}#${options.ids?.() ?? randomId()}`;
        const reply = runAgentStep(agent, request, {
          registry: options.registry,
          workspaceRoot: options.workspaceRoot,
          clock: options.clock ?? systemClock,
          events,
          publish: (event) => bus.publishEvent(event),
          // The step ends when the workflow stops waiting for it, not only when this host stops.
          signal: request.timeoutMs
            ? AbortSignal.any([abort.signal, AbortSignal.timeout(request.timeoutMs)])
            : abort.signal,
          ...(options.price ? { price: options.price } : {}),
          ...(options.human ? { human: options.human } : {}),
          ...(options.memory ? { memory: options.memory } : {}),
          ...(options.journal ? { journal: options.journal } : {}),
          logger,
        })
          // A step cut short by this host stopping is not the step's failure: say so, so the workflow retries it.
          .then((result) =>
            stopping
              ? failedReply(
                  request.stepId,
                  'worker_stopped',
                  `the worker serving ${agent.name} stopped mid-step`,
                )
              : result,
          )
          .catch((error: unknown) => {
            logger.error({ err: error, stepId: request.stepId }, 'agent step crashed');
            return failedReply(
              request.stepId,
              'agent_crashed',
              `agent ${agent.name} crashed: ${(error as Error).message}`,
            );
          });
        replies.set(request.stepId, reply);
        const done = reply
          .then((result) => delivery.respond(result))
          .finally(() => {
            clearInterval(beat);
            running.delete(key);
            replies.delete(request.stepId);
            remember(request.stepId, reply);
          });
        running.set(key, { taskId: request.taskId, abort, done });
      },
      {
        queue: `troupe-${pipeline}-${agent.name}`,
        reporter: `agent:${pipeline}/${agent.name}`,
        meta: (request) => ({
          taskId: request.taskId,
          from: request.from ?? 'workflow',
          to: request.agent,
          kind: 'agent.step',
        }),
      },
    );
    subscriptions.push(subscription);
  }
  // A cancelled task's steps stop here too, wherever its workflow runs; the coordinator answers the cancel.
  subscriptions.push(
    // Read as text: a malformed control message is the coordinator's to report, not every host's.
    bus.subscribeText(subjects.allControl, (delivery) => {
      if (!parseMessage(ControlMessage, delivery.value).ok) return;
      const taskId = delivery.subject.slice(subjects.control('').length);
      for (const step of running.values()) if (step.taskId === taskId) step.abort.abort();
    }),
  );
  logger.info({ pipeline, agents: options.agents.map((a) => a.name) }, 'agent host started');

  return {
    get inFlight() {
      return running.size;
    },
    async stop() {
      stopping = true;
      for (const subscription of subscriptions) subscription.unsubscribe();
      for (const step of running.values()) step.abort.abort();
      await Promise.allSettled([...running.values()].map((step) => step.done));
    },
  };
}
