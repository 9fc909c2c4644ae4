import type { ModelResponse } from '@troupe/llm';
import {
  type AgentStepReply,
  AgentStepRequest,
  FINAL_EVENT_KINDS,
  isRetryable,
  parseEvent,
  type StepErrorCode,
  type StepHeartbeat,
  subjects,
  type TaskEnding,
} from '@troupe/protocol';
import type { HumanGate } from '../approvals/humanGate.ts';
import { endingOf } from '../approvals/taskEnded.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import type { ValueStore } from '../durable/valueStore.ts';
import { type Clock, every, systemClock } from '../events/clock.ts';
import { EventFactory } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { KvMemory } from '../memory/memoryStore.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { Bus, BusSubscription, Delivery } from '../transport/bus.ts';
import { type HeartbeatSender, InlineHeartbeatSender } from '../transport/heartbeatSender.ts';
import type { WorkspaceLimits } from '../workspace/workspaceLimits.ts';
import { WorkspaceSync } from '../workspace/workspaceSync.ts';
import type { StepStop } from './agentMachine.ts';
import { type HostedAgent, isRemoteAgent } from './remoteAgent.ts';
import { type AgentStep, type StepDeps, startAgentStep } from './runAgentStep.ts';
import { serveSessionSummaries } from './sessionSummary.ts';
import { failedReply } from './stepReply.ts';

/** How many recent step replies a host keeps for resends. */
const RECENT_REPLIES = 1_000;
/**
 * Heartbeats in a row with nobody waiting after which a step is stopped: 50 s at the default 5 s, longer than
 * the default ack wait (30 s), so a coordinator that resumes the task usually resends the step in time to join.
 */
const ORPHANED_AFTER = 10;
/** Heartbeats in a row that must find a requester's inbox gone before it counts as gone (not a reconnect blip). */
const MISSES_TO_DROP = 2;
/**
 * How long a model call runs before the step's requesters are told it waits on the model (the workflow then parks
 * the task and starts another in its working slot). Quicker calls count as work and are never reported; real model
 * calls seldom are.
 */
const MODEL_WAIT_REPORT_MS = 100;
/**
 * Whether a resend of a step that failed with `code` runs it again rather than getting this reply: a failure the
 * workflow retries, or a run stopped before its end (by this host stopping, or for want of a requester).
 */
const runsAgain = (code: StepErrorCode): boolean => isRetryable(code) || code === 'aborted';

/** A step running on this host, and who waits for its reply. */
interface StepRun {
  request: AgentStepRequest;
  /** The agent actor running the step. */
  step: AgentStep;
  /** Sent a stop already (the task ended, nobody waits, or this host is stopping). */
  stopped: boolean;
  /** The deliveries of this step (the first, and resends that joined it), with the heartbeats in a row that found their inbox gone. */
  requesters: Map<Delivery<AgentStepRequest>, number>;
  /** When a requester was last known to listen. */
  lastWaitedFor: number;
  /** Stopped because nobody waited for it any more. */
  orphaned: boolean;
  done: Promise<void>;
  /** The model call in flight: the timer that reports it once it has lasted, and whether it was reported. */
  model?: { timer: unknown; reported: boolean } | undefined;
}

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
 * the work. Each step request starts an agent actor; its reply goes back to the requester. The session summarizer
 * also serves `troupe.agents.<pipeline>.<agent>.summarize`.
 */
export function startAgentHost(options: AgentHostOptions): AgentHost {
  const { bus, pipeline, logger } = options;
  const clock = options.clock ?? systemClock;
  const events = new EventFactory(clock);
  const heartbeats = options.heartbeats ?? new InlineHeartbeatSender(bus, clock);
  const workspace =
    options.values && options.handOffWorkspace
      ? new WorkspaceSync({
          values: options.values,
          workspaceRoot: options.workspaceRoot,
          logger,
          ...(options.workspaceLimits ? { limits: options.workspaceLimits } : {}),
        })
      : undefined;
  /** Steps running here, by step id. */
  const runs = new Map<string, StepRun>();
  const subscriptions: BusSubscription[] = [];
  // A step that starts or stops waiting for a person says so at once, not at its next heartbeat.
  const stopWatchingWaits = options.human?.onWaitingChange?.((stepId) => {
    const run = runs.get(stepId);
    if (run?.request.heartbeatMs !== undefined) beat(run, run.request.heartbeatMs);
  });
  // A heartbeat that found its inbox gone counts against that requester; one that got through clears it.
  const stopListening = heartbeats.onListening((stepId, inbox, listening) => {
    const run = runs.get(stepId);
    if (!run) return;
    for (const [requester, misses] of run.requesters) {
      if (requester.reply === inbox) run.requesters.set(requester, listening ? 0 : misses + 1);
    }
  });
  /** Replies of steps that ended here lately, for a resend whose first reply was lost; oldest first. */
  const finished = new Map<string, Promise<AgentStepReply>>();
  const remember = (stepId: string, reply: Promise<AgentStepReply>) => {
    finished.set(stepId, reply);
    if (finished.size > RECENT_REPLIES) finished.delete(finished.keys().next().value as string);
  };
  let stopping = false;

  /** Sends a run's agent actor a stop, once: the first reason is the one its reply gives. */
  const stopRun = (run: StepRun, stop: StepStop) => {
    if (run.stopped) return;
    run.stopped = true;
    run.step.stop(stop);
  };

  /**
   * Tells the heartbeat sender where the run's heartbeats go (the requesters whose inbox is not gone: their
   * workflow died, or sent the step elsewhere) and what they say (whom the step waits on). A run nobody has waited
   * for during {@link ORPHANED_AFTER} heartbeats is stopped: its journal keeps what it did, for the run that gets
   * the step next.
   */
  const beat = (run: StepRun, heartbeatMs: number) => {
    const { stepId, taskId } = run.request;
    const inboxes = [...run.requesters].flatMap(([requester, misses]) =>
      requester.reply !== undefined && misses < MISSES_TO_DROP ? [requester.reply] : [],
    );
    const waitingFor = options.human?.waitingOn?.(stepId);
    const heartbeat: StepHeartbeat = {
      stepId,
      heartbeat: true,
      ...(waitingFor ? { waitingFor } : {}),
      ...(run.model?.reported ? { waitingOnModel: true as const } : {}),
    };
    heartbeats.beat(stepId, inboxes, heartbeatMs, heartbeat);
    if (inboxes.length > 0) run.lastWaitedFor = clock.now();
    else if (clock.now() - run.lastWaitedFor >= ORPHANED_AFTER * heartbeatMs && !run.orphaned) {
      run.orphaned = true;
      logger.warn(
        { stepId, taskId },
        `nobody waits for step ${stepId} any more (its workflow died or sent it elsewhere); stopping it here`,
      );
      // Its approvals and questions stay pending for the run that gets the step next.
      options.human?.leavePending?.(stepId);
      stopRun(run, { why: 'orphaned' });
    }
  };

  /**
   * The agent a step runs: this host's own for a step of its version (or of none), else as the step's version
   * defines it; a reply saying why when there is none.
   */
  const agentFor = async (
    own: HostedAgent | undefined,
    name: string,
    request: AgentStepRequest,
  ): Promise<HostedAgent | AgentStepReply> => {
    const version = request.version;
    if (own && (version === undefined || version === options.version)) return own;
    const short = version?.slice(0, 12);
    const unavailable = (why: string) => failedReply(request.stepId, 'version_unavailable', why);
    if (version === undefined)
      return unavailable(`agent ${name} of pipeline ${pipeline} is served here only for older versions`);
    if (!options.agentOf)
      return unavailable(`this host runs only its own version of pipeline ${pipeline}, not ${short}`);
    try {
      const defined = await options.agentOf(version, name);
      if (typeof defined === 'string') return unavailable(defined);
      return (
        defined ??
        unavailable(`version ${short} of pipeline ${pipeline} is not stored or has no agent ${name}`)
      );
    } catch (error) {
      logger.error({ err: error, version, agent: name }, `cannot load agent ${name} of version ${short}`);
      return failedReply(
        request.stepId,
        'journal_unavailable',
        `cannot load agent ${name} of version ${short} of pipeline ${pipeline}: ${(error as Error).message}`,
      );
    }
  };

  const ownAgents = new Map(options.agents.map((agent) => [agent.name, agent]));
  const older = (options.olderAgents ?? []).filter((name) => !ownAgents.has(name));
  for (const name of [...ownAgents.keys(), ...older]) {
    const own = ownAgents.get(name);
    const subject = subjects.agent(pipeline, name);
    const serve = (delivery: Delivery<AgentStepRequest>, agent: HostedAgent): void => {
      const request = delivery.value;
      // A step that waited for an earlier run to unwind may come back after stop(): it goes to another worker.
      if (stopping) {
        delivery.respond(
          failedReply(request.stepId, 'worker_stopped', `the worker serving ${agent.name} is stopping`),
        );
        return;
      }
      // The same step sent again (its first reply was lost to a reconnect) joins the run already going here,
      // or gets the reply that run gave, rather than running twice.
      const underway = runs.get(request.stepId);
      if (underway && !underway.orphaned) {
        underway.requesters.set(delivery, 0);
        if (request.heartbeatMs !== undefined) beat(underway, request.heartbeatMs);
        return;
      }
      // A run stopped for want of a requester is unwinding: the new one starts once it is done.
      if (underway) {
        void underway.done.then(() => serve(delivery, agent));
        return;
      }
      const recent = finished.get(request.stepId);
      if (recent) {
        void recent.then((reply) => delivery.respond(reply));
        return;
      }
      const deps: StepDeps = {
        registry: options.registry,
        workspaceRoot: options.workspaceRoot,
        clock,
        events,
        publish: (event) => bus.publishEvent(event),
        ...(options.price ? { price: options.price } : {}),
        modelWait: (stepId, waiting) => {
          const current = runs.get(stepId);
          if (current) modelWait(current, waiting);
        },
        ...(options.human ? { human: options.human } : {}),
        ...(options.memory ? { memory: options.memory } : {}),
        ...(options.journal ? { journal: options.journal } : {}),
        ...(options.values ? { values: options.values } : {}),
        ...(workspace ? { workspace } : {}),
        logger,
      };
      const step = isRemoteAgent(agent)
        ? agent.startStep(request, deps)
        : startAgentStep(agent, request, deps);
      const reply = step.reply;
      const run: StepRun = {
        request,
        step,
        stopped: false,
        requesters: new Map([[delivery, 0]]),
        lastWaitedFor: clock.now(),
        orphaned: false,
        done: Promise.resolve(),
      };
      // While the step runs, its requesters hear from this host (if they asked to), so they can tell a long
      // step from a dead worker; the first heartbeat goes at once.
      const heartbeatMs = request.heartbeatMs;
      const beating =
        heartbeatMs === undefined ? undefined : every(clock, heartbeatMs, () => beat(run, heartbeatMs));
      if (heartbeatMs !== undefined) beat(run, heartbeatMs);
      run.done = reply
        .then((result) => {
          // Every requester seen gets the reply: one whose inbox seemed gone may be back after a reconnect.
          for (const requester of run.requesters.keys()) requester.respond(result);
          // A run stopped for want of a requester, or a failure a resend retries, did not end the step: the
          // next request for it runs it again (from its journal) rather than getting this reply.
          if (!run.orphaned && (result.ok || !runsAgain(result.error.code))) remember(request.stepId, reply);
        })
        .finally(() => {
          beating?.();
          clock.clearTimeout(run.model?.timer);
          if (runs.get(request.stepId) === run) {
            runs.delete(request.stepId);
            heartbeats.stop(request.stepId);
          }
        });
      runs.set(request.stepId, run);
    };
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
      // The host's own agent is used at once; another version's is loaded first (once per version, then cached).
      const versionOwn = own && (request.version === undefined || request.version === options.version);
      if (versionOwn) {
        serve(delivery, own);
        return;
      }
      void agentFor(own, name, request).then((found) => {
        if ('stepId' in found) delivery.respond(found);
        else serve(delivery, found);
      });
    };
    const subscription = bus.subscribe(subject, AgentStepRequest, receive, {
      queue: `troupe-${pipeline}-${name}`,
      reporter: `agent:${pipeline}/${name}`,
      meta: (request) => ({
        taskId: request.taskId,
        from: request.from ?? 'workflow',
        to: request.agent,
        kind: 'agent.step',
      }),
    });
    subscriptions.push(subscription);
    if (own && !isRemoteAgent(own) && options.sessionSummarizer === name) {
      subscriptions.push(
        serveSessionSummaries(own, {
          bus,
          pipeline,
          clock,
          events,
          logger,
          ...(options.price ? { price: options.price } : {}),
          stopping: () => stopping,
        }),
      );
    }
  }
  /**
   * A model call of the run starts or ends. One that lasts is reported in the next heartbeat, sent then; its end is
   * reported at once too, so the workflow counts the task as working again without waiting for a heartbeat.
   */
  const modelWait = (run: StepRun, waiting: boolean) => {
    const heartbeatMs = run.request.heartbeatMs;
    if (heartbeatMs === undefined) return;
    if (waiting) {
      clock.clearTimeout(run.model?.timer);
      const model = {
        reported: false,
        timer: clock.setTimeout(() => {
          model.reported = true;
          beat(run, heartbeatMs);
        }, MODEL_WAIT_REPORT_MS),
      };
      run.model = model;
      return;
    }
    const ended = run.model;
    if (!ended) return;
    clock.clearTimeout(ended.timer);
    run.model = undefined;
    if (ended.reported) beat(run, heartbeatMs);
  };

  /** Stops every step of a task that has ended: nothing it would still do (a tool call, a question) matters. */
  const endTask = (taskId: string, ending: TaskEnding) => {
    for (const run of runs.values()) {
      if (run.request.taskId !== taskId || run.stopped) continue;
      logger.info({ taskId, stepId: run.request.stepId }, `task ${taskId} has ended; stopping its step here`);
      stopRun(run, { why: 'task_ended', taskId, ending });
    }
  };
  // A task's steps stop here on its final event, wherever its workflow runs: completed, failed (a timeout, a
  // budget, another step's error) or cancelled. Not on a cancel request itself: when no coordinator runs the task,
  // the request changes nothing, and neither may its steps.
  for (const kind of FINAL_EVENT_KINDS) {
    subscriptions.push(
      bus.subscribeText(subjects.event(pipeline, '*', kind), (delivery) => {
        if (runs.size === 0) return;
        const parsed = parseEvent(delivery.value, delivery.subject);
        const ending = parsed.ok ? endingOf(parsed.value) : undefined;
        if (parsed.ok && ending) endTask(parsed.value.taskId, ending);
      }),
    );
  }
  logger.info(
    { pipeline, agents: [...ownAgents.keys()], ...(older.length > 0 ? { olderAgents: older } : {}) },
    'agent host started',
  );

  return {
    get inFlight() {
      return runs.size;
    },
    async stop() {
      stopping = true;
      for (const subscription of subscriptions) subscription.unsubscribe();
      for (const run of runs.values()) stopRun(run, { why: 'worker_stopping' });
      await Promise.allSettled([...runs.values()].map((run) => run.done));
      stopListening();
      stopWatchingWaits?.();
    },
  };
}
