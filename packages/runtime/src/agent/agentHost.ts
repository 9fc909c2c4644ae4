import type { ModelResponse } from '@troupe/llm';
import type { AgentStepRequest } from '@troupe/protocol';
import type { HumanGate } from '../approvals/humanGate.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import type { ValueStore } from '../durable/valueStore.ts';
import { type Clock, systemClock } from '../events/clock.ts';
import { EventFactory } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { KvMemory } from '../memory/memoryStore.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import { type HeartbeatSender, InlineHeartbeatSender } from '../transport/heartbeatSender.ts';
import type { WorkspaceLimits } from '../workspace/workspaceLimits.ts';
import { WorkspaceSync } from '../workspace/workspaceSync.ts';
import { isOwnVersion } from './agentForStep.ts';
import { DEFAULT_PARK_AFTER_MS } from './agentRun.ts';
import { type StepDeps, type StepStart, startAgentStep } from './agentStep.ts';
import { type LocalSteps, takeLocally } from './localSteps.ts';
import { type HostedAgent, isRemoteAgent } from './remoteAgent.ts';
import { serveSessionSummaries } from './sessionSummary.ts';
import { watchSteering } from './steeringWatch.ts';
import { StepActors } from './stepActors.ts';
import { subscribeStepIntake } from './stepIntake.ts';
import { StepsInFlight } from './stepsInFlight.ts';
import { watchTaskEnds } from './taskEndWatch.ts';

export interface AgentHostOptions {
  bus: Bus;
  pipeline: string;
  /** The agents served here: run by this host, or called where they live (see {@link HostedAgent}). */
  agents: readonly HostedAgent[];
  registry: ToolRegistry;
  workspaceRoot: string;
  logger: Logger;
  clock?: Clock;
  price?: (provider: string, model: string, response: ModelResponse) => number;
  /** Where `ask` calls and questions go; without it they are denied. */
  human?: HumanGate;
  /** Task and agent memory for the memory tools. */
  memory?: KvMemory;
  /** Records tool calls so a step run again after a crash runs none twice. */
  journal?: StepJournal;
  /** Keeps outputs and tool results too large for a message, and reads earlier steps' back whole. */
  values?: ValueStore;
  /**
   * Hand each task's workspace files between its steps and hosts through `values` (the pipeline's `workspace.handOff`);
   * without it, files stay on this host's disk and steps carry no manifest.
   */
  handOffWorkspace?: boolean;
  /** How much of a task's workspace is handed on between steps; the defaults when absent. */
  workspaceLimits?: WorkspaceLimits;
  /**
   * Sends steps' heartbeats; by default from this thread. Give a {@link ThreadedHeartbeatSender} in a real
   * process, so a busy event loop cannot starve them (and make a live step look dead).
   */
  heartbeats?: HeartbeatSender;
  /** The agent that folds the pipeline's older session turns into a summary (see `SessionSummaryRequest`). */
  sessionSummarizer?: string;
  /** The hash of the pipeline version `agents` come from: a step of that version (or of none) runs them as given. */
  version?: string;
  /**
   * An agent as another version of the pipeline defines it, for a step of a task that runs on that version;
   * undefined when that version is not stored or has no such agent, a string saying why when it cannot run here
   * (an API key this host lacks, say). Without it, such a step fails `version_unavailable`.
   */
  agentOf?: (version: string, agent: string) => Promise<HostedAgent | string | undefined>;
  /**
   * Agents that only other versions of the pipeline have (renamed or removed since): served too, each step run as
   * its version defines the agent, so a task of such a version finds its steps served.
   */
  olderAgents?: readonly string[];
  /**
   * An agent of another version that `agentOf` has loaded already, found at once: `local` takes a step of that version
   * for it. A step whose version is not loaded here goes over NATS (whose intake loads it).
   */
  loadedAgentOf?: (version: string, agent: string) => HostedAgent | undefined;
  /**
   * The most steps in flight here (from NATS or not) for `local` to take one more: past it, a workflow in this
   * process sends its step over NATS, where any worker may take it. 0 (the default) takes none this way.
   */
  maxLocalSteps?: number;
  /**
   * How long a step's model call waits before the step is parked: its agent actor stopped, its context and the call
   * kept, a new actor taking it up when the reply lands (see `AgentRun`). Default {@link DEFAULT_PARK_AFTER_MS}; 0
   * parks no step.
   */
  parkAfterMs?: number;
}

/** A running set of agent actors serving their subjects. */
export interface AgentHost {
  /** Steps being worked on now. */
  readonly inFlight: number;
  /** Of them, the steps parked now (`parkAfterMs`): their agent actors let go while their model calls wait. */
  readonly parked: number;
  /**
   * Takes a step of this host's pipeline and agents from a workflow in this process, with no NATS: one of its own
   * version, or of a version whose agent is loaded here already (see `loadedAgentOf`).
   */
  readonly local: LocalSteps;
  /** Stops taking steps, aborts the ones in flight and waits for their replies to go out. */
  stop(): Promise<void>;
}

/**
 * Serves `troupe.agents.<pipeline>.<agent>` for each agent, in a queue group, so any number of hosts share
 * the work. Each step request starts an agent actor; its reply goes back to the requester. The session summarizer
 * also serves `troupe.agents.<pipeline>.<agent>.summarize`.
 *
 * The parts: {@link subscribeStepIntake} takes each agent's steps, {@link StepsInFlight} holds the runs under way
 * (each a `StepRun`, with its requesters and heartbeats), {@link watchTaskEnds} stops a task's steps on its end,
 * {@link watchSteering} hands them its pauses and the messages people tell it.
 */
export function startAgentHost(options: AgentHostOptions): AgentHost {
  const { bus, pipeline, logger, human } = options;
  const parkAfterMs = options.parkAfterMs ?? DEFAULT_PARK_AFTER_MS;
  if (!Number.isFinite(parkAfterMs) || parkAfterMs < 0)
    throw new Error(
      `parkAfterMs must be 0 (parking off) or a number of milliseconds above 0, not ${parkAfterMs}`,
    );
  const clock = options.clock ?? systemClock;
  const events = new EventFactory(clock);
  const heartbeats = options.heartbeats ?? new InlineHeartbeatSender(bus, clock);
  // One root actor for the host's lifetime: each step's agent actor runs under it, not as a root (a system) of its own.
  const actors = new StepActors(clock);
  const deps = stepDeps({ ...options, parkAfterMs }, clock, events, actors, (stepId, waiting) =>
    steps.modelWait(stepId, waiting),
  );
  const steps = new StepsInFlight({
    clock,
    heartbeats,
    human,
    logger,
    start: (agent, request, options) => {
      const ofStep = depsOfStep(deps, request.stepId, options);
      return isRemoteAgent(agent)
        ? agent.startStep(request, ofStep)
        : startAgentStep(agent, request, ofStep, options);
    },
  });
  // A step that starts or stops waiting for a person says so at once, not at its next heartbeat.
  const stopWatchingWaits = human?.onWaitingChange?.((stepId) => steps.waitingChanged(stepId));
  // A heartbeat that found its inbox gone counts against that requester; one that got through clears it.
  const stopListening = heartbeats.onListening((stepId, inbox, listening) =>
    steps.heard(stepId, inbox, listening),
  );

  const ownAgents = new Map(options.agents.map((agent) => [agent.name, agent]));
  const older = (options.olderAgents ?? []).filter((name) => !ownAgents.has(name));
  const intake = { bus, pipeline, steps, logger, version: options.version, agentOf: options.agentOf };
  const subscriptions: BusSubscription[] = [];
  for (const name of [...ownAgents.keys(), ...older]) {
    const own = ownAgents.get(name);
    subscriptions.push(subscribeStepIntake(name, own, intake));
    if (own && !isRemoteAgent(own) && options.sessionSummarizer === name) {
      subscriptions.push(
        serveSessionSummaries(own, {
          bus,
          pipeline,
          clock,
          events,
          logger,
          ...(options.price ? { price: options.price } : {}),
          stopping: () => steps.stopping,
        }),
      );
    }
  }
  subscriptions.push(...watchTaskEnds(bus, pipeline, steps), ...watchSteering(bus, pipeline, steps));
  logger.info(
    { pipeline, agents: [...ownAgents.keys()], ...(older.length > 0 ? { olderAgents: older } : {}) },
    'agent host started',
  );

  const maxLocalSteps = options.maxLocalSteps ?? 0;
  const served = new Set([...ownAgents.keys(), ...older]);
  /** The agent a step taken locally runs: the one this host's intake would give it, if it has it at hand. */
  const localAgent = (request: AgentStepRequest): HostedAgent | undefined => {
    if (isOwnVersion(request, intake)) return ownAgents.get(request.agent);
    if (request.version === undefined || !served.has(request.agent)) return undefined;
    return options.loadedAgentOf?.(request.version, request.agent);
  };
  /** Steps taken locally whose run starts at the end of this turn (see `takeLocally`): they count as in flight. */
  let starting = 0;
  const local: LocalSteps = {
    tryTake(request, hooks) {
      if (steps.stopping || steps.size + starting >= maxLocalSteps || request.pipeline !== pipeline)
        return undefined;
      const agent = localAgent(request);
      if (!agent) return undefined;
      starting += 1;
      queueMicrotask(() => (starting -= 1));
      return takeLocally(steps, agent, request, hooks);
    },
  };

  return {
    get inFlight() {
      return steps.size;
    },
    get parked() {
      return steps.parked;
    },
    local,
    async stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      await steps.stop();
      actors.stop();
      stopListening();
      stopWatchingWaits?.();
    },
  };
}

/**
 * What one step is given: the host's, but for a step taken by a workflow in this process, whose journal waits for that
 * workflow's checkpoint (see `StepJournal.forLocalStep`).
 */
function depsOfStep(deps: StepDeps, stepId: string, { checkpoint }: StepStart): StepDeps {
  const journal = deps.journal;
  return checkpoint && journal ? { ...deps, journal: journal.forLocalStep(stepId, checkpoint) } : deps;
}

/** What every step of this host is given: the same for all, so it is made once. */
function stepDeps(
  options: AgentHostOptions,
  clock: Clock,
  events: EventFactory,
  actors: StepActors,
  modelWait: (stepId: string, waiting: boolean) => void,
): StepDeps {
  const { bus, logger, values } = options;
  const workspace =
    values && options.handOffWorkspace
      ? new WorkspaceSync({
          values,
          workspaceRoot: options.workspaceRoot,
          logger,
          ...(options.workspaceLimits ? { limits: options.workspaceLimits } : {}),
        })
      : undefined;
  return {
    registry: options.registry,
    workspaceRoot: options.workspaceRoot,
    clock,
    events,
    publish: (event) => bus.publishEvent(event),
    ...(options.price ? { price: options.price } : {}),
    modelWait,
    ...(options.parkAfterMs ? { parkAfterMs: options.parkAfterMs } : {}),
    actors,
    ...(options.human ? { human: options.human } : {}),
    ...(options.memory ? { memory: options.memory } : {}),
    ...(options.journal ? { journal: options.journal } : {}),
    ...(values ? { values } : {}),
    ...(workspace ? { workspace } : {}),
    logger,
  };
}
