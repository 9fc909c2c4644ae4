import type { ToolDefinition } from '@troupe/llm';
import type { AgentStepReply, AgentStepRequest, ToldMessage } from '@troupe/protocol';
import type { CallerCheckpoint } from '../durable/callerCheckpoint.ts';
import { traceparentOf } from '../telemetry/tracing.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { AgentDefinition } from './agentDefinition.ts';
import type { AgentMachineInput, StepStop } from './agentMachine.ts';
import { AgentRun } from './agentRun.ts';
import { type StepContext, type StepDeps, scopeOf } from './stepContext.ts';
import { buildStepMessages } from './stepPrompt.ts';
import { crashedReply, outOfTimeReply, withAskedPeople } from './stepReply.ts';
import { StepServices } from './stepServices.ts';
import { StepTold } from './stepTold.ts';
import { endAgentSpan, startAgentSpan } from './stepTracing.ts';
import { unreadContextReply, withWholeContext } from './stepValues.ts';
import { handOnWorkspace, unpulledWorkspaceReply } from './stepWorkspace.ts';

export type { StepDeps };

/** How a step starts: `paused`, its task was paused before it reached its host (it stops before its first call). */
export interface StepStart {
  paused?: boolean;
  /**
   * The checkpoint of the workflow in this process that took the step: its journal waits for it before each write,
   * and its final model reply is recorded by it (see `StepJournal.forLocalStep`).
   */
  checkpoint?: CallerCheckpoint;
}

/** A step of an agent under way: its reply once it ends, and the way to stop it before then. */
export interface AgentStep {
  /** The reply for the workflow; never rejects. */
  readonly reply: Promise<AgentStepReply>;
  /** Sends the agent actor a stop; it replies with what it had spent (a step that has ended ignores it). */
  stop(stop: StepStop): void;
  /**
   * The step's task was paused: the step finishes its model call or tool calls and replies `paused` before its next
   * model call. Absent where the step cannot stop between calls (an agent in another system): it runs to its end.
   */
  pause?(): void;
  /** A person told the step's task something: the agent reads it before its next model call. */
  tell?(message: ToldMessage): void;
  /** Parked now: its agent actor let go while its model call waits (see `AgentRun`). */
  readonly parked?: boolean;
}

/**
 * Starts one step of an agent: an agent actor, served by the journaled model and tools, whose emitted events are
 * published. The step stops itself when the task's wall-clock budget or the request's `timeoutMs` runs out.
 * Never throws: a step that cannot start replies `agent_crashed`.
 */
export function startAgentStep(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
  options: StepStart = {},
): AgentStep {
  let span: ReturnType<typeof startAgentSpan> | undefined;
  let started: AgentStep;
  let told: StepTold | undefined;
  const asked = { people: false };
  try {
    span = startAgentSpan(agent, request);
    const scope = scopeOf(request);
    const step: StepContext = {
      agent,
      request,
      deps,
      span,
      scope: { ...scope, traceparent: traceparentOf(span, scope.traceparent) },
      told: new StepTold(request.told),
      asked,
    };
    told = step.told;
    started = startStep(step, options.paused === true);
  } catch (error) {
    // Never thrown at the host: a step that cannot even start replies `agent_crashed`.
    started = { reply: Promise.resolve(crashedReply(request, error)), stop: () => {} };
  }
  const reply = started.reply.then((result) => {
    // A span that cannot be ended must not cost the reply.
    try {
      if (span) endAgentSpan(span, result);
    } catch (error) {
      deps.logger?.warn({ err: error, stepId: request.stepId }, 'cannot end the step span');
    }
    return withAskedPeople(result, request, asked.people);
  });
  return new StartedStep(reply, started, told);
}

/**
 * A step started here, as its host holds it: its reply, and what reaches its run. What is told before the agent actor
 * runs (its workspace still pulled) waits in the step's list all the same. Methods, not closures: a parked step
 * keeps one object here.
 */
class StartedStep implements AgentStep {
  readonly reply: Promise<AgentStepReply>;
  readonly #run: AgentStep;
  readonly #told: StepTold | undefined;

  constructor(reply: Promise<AgentStepReply>, run: AgentStep, told: StepTold | undefined) {
    this.reply = reply;
    this.#run = run;
    this.#told = told;
  }

  stop(stop: StepStop): void {
    this.#run.stop(stop);
  }

  pause(): void {
    this.#run.pause?.();
  }

  tell(message: ToldMessage): void {
    this.#told?.hear(message);
  }

  get parked(): boolean {
    return this.#run.parked === true;
  }
}

function startStep(step: StepContext, paused: boolean): AgentStep {
  const { request, deps } = step;
  const deadline = request.budget?.deadline;
  const timeLeftMs = deadline === undefined ? undefined : deadline - deps.clock.now();
  // A step whose task is paused stops before its first call, `paused`, its deadline passed or not: the workflow that
  // holds it decides whether the task's time is up.
  if (timeLeftMs !== undefined && timeLeftMs <= 0 && !paused)
    return { reply: outOfTimeReply(step), stop: () => {} };
  const sync = deps.workspace;
  const stored = request.inputCut !== undefined || request.context.some((output) => output.outputRef);
  if (!sync && !stored) return startActorSafely(step, timeLeftMs, paused);
  // The workspace is brought to the step's manifest, and the input and earlier outputs kept in the object store are
  // read back whole, first; a stop or a pause meanwhile reaches the actor once it runs.
  let started: AgentStep | undefined;
  let stopBefore: StepStop | undefined;
  let pausedBefore = paused;
  const pulled = sync
    ? sync.pull(request.pipeline, request.taskId, request.workspace).then(
        () => undefined,
        (error: unknown) => unpulledWorkspaceReply(request, error),
      )
    : Promise.resolve(undefined);
  const reply = pulled.then((failed) =>
    failed
      ? failed
      : withWholeContext(step).then(
          (whole) => {
            started = startActorSafely({ ...step, request: whole }, timeLeftMs, pausedBefore);
            if (stopBefore) started.stop(stopBefore);
            return sync ? started.reply.then((ended) => handOnWorkspace(step, sync, ended)) : started.reply;
          },
          (error: unknown) => unreadContextReply(request, error),
        ),
  );
  return {
    reply,
    stop: (stop) => {
      stopBefore ??= stop;
      started?.stop(stop);
    },
    pause: () => {
      pausedBefore = true;
      started?.pause?.();
    },
    get parked() {
      return started?.parked === true;
    },
  };
}

function startActorSafely(step: StepContext, timeLeftMs: number | undefined, paused: boolean): AgentStep {
  try {
    return startActor(step, timeLeftMs, paused);
  } catch (error) {
    // Never thrown at the host: a step that cannot even start replies `agent_crashed`.
    return { reply: Promise.resolve(crashedReply(step.request, error)), stop: () => {} };
  }
}

function startActor(step: StepContext, timeLeftMs: number | undefined, paused: boolean): AgentStep {
  const { agent, request, deps } = step;
  const services = new StepServices(step);
  const input: AgentMachineInput = {
    services,
    agent: agent.name,
    stepId: request.stepId,
    messages: buildStepMessages(agent.instructions, request),
    tools: toolDefinitions(deps.registry, agent),
    maxTurns: agent.maxTurns,
    expect: request.expect,
    ...(request.budget ? { budget: request.budget } : {}),
    ...(timeLeftMs === undefined ? {} : { timeLeftMs }),
    ...(request.timeoutMs === undefined ? {} : { timeoutMs: request.timeoutMs }),
    ...(agent.contextTokens === undefined ? {} : { contextTokens: agent.contextTokens }),
    ...(request.expect === 'text' && (request.output ?? agent.outputSchema)
      ? { outputSchema: request.output ?? agent.outputSchema }
      : {}),
    ...(paused ? { paused } : {}),
  };
  return new AgentRun(step, services, input);
}

/** Each agent's tool definitions, per registry: made once and shared by its steps (nothing changes them). */
const definitionsMade = new WeakMap<ToolRegistry, WeakMap<AgentDefinition, ToolDefinition[]>>();

/**
 * The tool definitions the model is shown, made once per agent: the registry clones each tool's JSON Schema when asked,
 * which every step in flight (a parked one too) would otherwise keep a copy of. Throws as the registry does.
 */
function toolDefinitions(registry: ToolRegistry, agent: AgentDefinition): ToolDefinition[] {
  let ofRegistry = definitionsMade.get(registry);
  if (!ofRegistry) {
    ofRegistry = new WeakMap();
    definitionsMade.set(registry, ofRegistry);
  }
  let definitions = ofRegistry.get(agent);
  if (!definitions) {
    definitions = registry.definitions(agent.tools);
    ofRegistry.set(agent, definitions);
  }
  return definitions;
}

/** Runs one step of an agent to its end and returns the reply for the workflow. Never throws. */
export function runAgentStep(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
): Promise<AgentStepReply> {
  return startAgentStep(agent, request, deps).reply;
}
