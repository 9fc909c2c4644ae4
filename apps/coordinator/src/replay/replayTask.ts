import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelResponse } from '@troupe/llm';
import type { AgentStepReply, AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import {
  EventFactory,
  type HumanGate,
  type Logger,
  startAgentStep,
  systemClock,
  ToolError,
  type ToolErrorCode,
  ToolRegistry,
} from '@troupe/runtime';
import { createActor, fromPromise, toPromise } from 'xstate';
import { z } from 'zod';
import { agentDefinitions } from '../config/agentDefinitions.ts';
import { builtinTools } from '../config/builtinTools.ts';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { resolveModelRef } from '../config/modelFactory.ts';
import { compileFlow } from '../workflow/compileFlow.ts';
import { recordedReuse } from '../workflow/reusedStep.ts';
import type { StepRunInput, StepRunOutput, WorkflowInput } from '../workflow/workflowTypes.ts';
import { MEMORY_TOOLS, type RealTools, realTools } from './realTools.ts';
import { recordedRemoteStep } from './recordedRemoteStep.ts';
import { type JournalReader, Recording, type ValueReader } from './recording.ts';

/**
 * One fact of a run that a replay must reproduce: the flow's path, each tool call with its arguments and what the
 * policy and the tool made of it, the messages people told the task that each step read and before which turn, each
 * step's outcome and verdict, and how the task ended. Timings, ids and the model's text are not facts here: a
 * replay is judged by what the agents did.
 */
export type RunFact =
  | { kind: 'step'; step: string; agent: string; round: number }
  | { kind: 'tool'; step: string; turn: number; index: number; tool: string; arguments: string }
  | { kind: 'tool result'; step: string; turn: number; index: number; decision: string; ok: boolean }
  | { kind: 'told'; step: string; turn: number; messageIds: string[] }
  | { kind: 'step end'; step: string; ok: boolean; verdict?: string; error?: string }
  | { kind: 'task end'; status: string; reason?: string };

/** The facts of a run, in order, from its events. */
export function factsOf(events: readonly TroupeEvent[]): RunFact[] {
  const facts: (RunFact | undefined)[] = [];
  const stepOf = new Map<string, string>();
  const seen = new Set<string>();
  // Where each step run's end is: a step whose final reply was asked again after a crash may have ended twice, and
  // the task went on with the later end (see docs/durability.md, "A local step's final reply").
  const endOf = new Map<string, number>();
  for (const event of events) {
    // A fact published again (a resumed step replays its calls) is the same fact.
    if (seen.has(event.id)) continue;
    seen.add(event.id);
    switch (event.kind) {
      case 'step.started':
        stepOf.set(event.data.stepId, event.data.step);
        facts.push({ kind: 'step', step: event.data.step, agent: event.data.agent, round: event.data.round });
        break;
      case 'tool.call':
        facts.push({
          kind: 'tool',
          step: stepOf.get(event.data.stepId) ?? event.data.stepId,
          turn: event.data.turn ?? 0,
          index: event.data.index ?? 0,
          tool: event.data.tool,
          arguments: event.data.arguments,
        });
        break;
      case 'tool.result':
        facts.push({
          kind: 'tool result',
          step: stepOf.get(event.data.stepId) ?? event.data.stepId,
          turn: event.data.turn ?? 0,
          index: event.data.index ?? 0,
          decision: event.data.decision,
          ok: event.data.ok,
        });
        break;
      case 'agent.told':
        facts.push({
          kind: 'told',
          step: stepOf.get(event.data.stepId) ?? event.data.stepId,
          turn: event.data.turn,
          messageIds: event.data.messageIds,
        });
        break;
      case 'step.completed': {
        const before = endOf.get(event.data.stepId);
        if (before !== undefined) facts[before] = undefined;
        endOf.set(event.data.stepId, facts.length);
        facts.push({
          kind: 'step end',
          step: event.data.step,
          ok: event.data.ok,
          ...(event.data.verdict ? { verdict: event.data.verdict.decision } : {}),
          ...(event.data.error ? { error: event.data.error.code } : {}),
        });
        break;
      }
      case 'task.completed':
        facts.push({ kind: 'task end', status: 'completed' });
        break;
      case 'task.failed':
        facts.push({ kind: 'task end', status: 'failed', reason: event.data.reason });
        break;
      case 'task.cancelled':
        facts.push({ kind: 'task end', status: 'cancelled' });
        break;
      default:
        break;
    }
  }
  return facts.filter((fact) => fact !== undefined);
}

export interface Divergence {
  /** Position among the facts, from 0. */
  at: number;
  recorded: RunFact | undefined;
  replayed: RunFact | undefined;
}

/** The first fact where two runs differ; undefined when they did the same. */
export function firstDivergence(
  recorded: readonly RunFact[],
  replayed: readonly RunFact[],
): Divergence | undefined {
  for (let at = 0; at < Math.max(recorded.length, replayed.length); at++) {
    const a = recorded[at];
    const b = replayed[at];
    if (JSON.stringify(a) !== JSON.stringify(b)) return { at, recorded: a, replayed: b };
  }
  return undefined;
}

export interface ReplayOptions {
  /** The pipeline to replay against: the one the task ran with, or an edited one. */
  pipeline: LoadedPipeline;
  /**
   * `run` (the default): built-in tools run again in a fresh workspace. `recorded`: every call the policy lets
   * through answers with what the recorded call returned (or fails as it failed), nothing runs.
   */
  tools?: 'run' | 'recorded';
  /**
   * The step journal the task ran with, if it can be read: replies, arguments and summaries longer than an event
   * keeps are read whole from it. Without it they replay as the events kept them (see `truncated`).
   */
  journal?: JournalReader;
  /**
   * The pipeline's object store, if it can be read: step outputs and tool results too large for an event (or the
   * journal) are read whole from it. Without it, recorded tool calls answer with what their events kept.
   */
  values?: ValueReader;
}

export interface ReplayResult {
  recorded: RunFact[];
  replayed: RunFact[];
  divergence: Divergence | undefined;
  /**
   * Texts the events kept only in part (long replies, arguments or summaries) that the journal could not make whole:
   * the replay may differ there for that reason.
   */
  truncated: string[];
  events: TroupeEvent[];
}

/**
 * Runs a recorded task again, offline, in this process: the pipeline's workflow machine, its steps run by agent
 * actors whose model answers from the recording (no model is called) and whose tools run again — built-ins in a
 * fresh workspace, MCP tools on the pipeline's servers — or answer from the record; no NATS, no journal of its own,
 * no time budget. Returns both runs' facts and the first point
 * where they differ.
 */
export async function replayTask(
  events: readonly TroupeEvent[],
  taskId: string,
  options: ReplayOptions,
): Promise<ReplayResult> {
  const recording = new Recording(taskId, events);
  if (!recording.accepted)
    throw new Error(`the recording of task ${taskId} has no task.accepted event to start from`);
  const { config } = options.pipeline;
  if (recording.pipeline !== config.name) {
    throw new Error(`task ${taskId} ran on pipeline ${recording.pipeline}, not ${config.name}`);
  }
  if (options.journal) await recording.restore(options.journal);
  if (options.values) await recording.restoreValues(options.values);
  // Tools run again in a fresh workspace (MCP tools on the pipeline's servers, connected now), or answer from the
  // record; either way under the (possibly edited) pipeline's policies, which decide before any tool runs.
  let real: RealTools | undefined;
  let registry: ToolRegistry;
  if (options.tools === 'recorded') registry = recordedTools(recording, config, undefined, options.values);
  else {
    // Memory's tools answer from the record (see MEMORY_TOOLS), the others run again.
    registry = recordedTools(recording, config, (name) => MEMORY_TOOLS.has(name), options.values);
    real = await realTools(options.pipeline, { into: registry });
  }
  try {
    const { events: replayed } = await runOffline({
      pipeline: options.pipeline,
      recording,
      task: recordedTask(recording),
      models: 'recorded',
      registry,
      human: recording.people(),
    });
    const recordedFacts = factsOf(recording.events);
    const replayedFacts = factsOf(replayed);
    return {
      recorded: recordedFacts,
      replayed: replayedFacts,
      divergence: firstDivergence(recordedFacts, replayedFacts),
      truncated: recording.truncated,
      events: replayed,
    };
  } finally {
    await real?.close();
  }
}

/** The task a recording ran, to run again under its own id, goal, input and trace. */
export function recordedTask(recording: Recording): WorkflowInput {
  const taskId = recording.taskId;
  const started = recording.accepted;
  if (!started) throw new Error(`the recording of task ${taskId} has no task.accepted event to start from`);
  const accepted = started.data;
  return {
    taskId,
    pipeline: recording.pipeline,
    goal: accepted.goal,
    ...(accepted.input ? { input: accepted.input } : {}),
    // Its steps read the whole input back, as the recorded run's did.
    ...(accepted.inputCut ? { inputCut: accepted.inputCut } : {}),
    ...(accepted.metadata ? { metadata: accepted.metadata } : {}),
    traceparent: started.traceparent,
    // A restart or fork takes what it reused from its origin again, as its events recorded it.
    ...(accepted.origin ? { origin: accepted.origin, ...recordedReuse(recording.events, taskId) } : {}),
  };
}

/** What a run of a pipeline's flow in this process, with no server, is made of. */
export interface OfflineRunOptions {
  pipeline: LoadedPipeline;
  /** The recorded run: remote agents' steps and what people told the task are answered from it. */
  recording: Recording;
  /** The task to run: the recording's own (a replay) or another (an eval case's, under an id of its own). */
  task: WorkflowInput;
  /** `recorded`: each agent's model answers from the recording; `pipeline`: the pipeline's own models are called. */
  models: 'recorded' | 'pipeline';
  registry: ToolRegistry;
  human: HumanGate;
  /** Prices each model reply by the pipeline's `prices:`; unpriced (cost 0) when false or absent. */
  priced?: boolean;
  /** Cancels the run: its steps are stopped and the task ends `task.cancelled`. */
  signal?: AbortSignal;
  logger?: Logger;
}

export interface OfflineRunResult {
  /** The run's events, in order, ending with its `task.completed`, `task.failed` or `task.cancelled`. */
  events: TroupeEvent[];
  /** How the task ended, and its whole output (the final event keeps the same text). */
  status: 'completed' | 'failed' | 'cancelled';
  output: string;
}

/**
 * Runs a task of a pipeline's flow in this process, with no NATS, no journal and no time budget: its steps run by
 * agent actors on the given tools and people, with the recording's models or the pipeline's own, in a fresh
 * workspace removed after. What `troupe replay` and the evals' replay and model modes run.
 */
export async function runOffline(options: OfflineRunOptions): Promise<OfflineRunResult> {
  const { recording, task } = options;
  const { config } = options.pipeline;
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-replay-'));
  const replayed: TroupeEvent[] = [];
  // The replayed events carry what the recording held (the agents' recorded replies): parsed, as any foreign input.
  const factory = new EventFactory(systemClock, { validate: true });
  const started = Date.now();
  try {
    const agents = new Map(
      agentDefinitions(options.pipeline).map((agent) => {
        if (options.models === 'pipeline') return [agent.name, agent];
        const entry = resolveModelRef(
          config,
          config.agents[agent.name]?.model ?? config.defaults.model ?? '',
        );
        const model = recording.modelFor(
          agent.name,
          entry?.provider ?? agent.model.provider,
          entry?.model ?? agent.model.model,
        );
        return [agent.name, { ...agent, model }];
      }),
    );
    const { prices } = options.pipeline;
    const deps = {
      registry: options.registry,
      human: options.human,
      workspaceRoot,
      clock: systemClock,
      events: factory,
      publish: (event: TroupeEvent) => {
        replayed.push(event);
      },
      // What people told the task is read at the turns the recorded run read it, as its events say.
      recordedTold: (stepId: string, turn: number) => recording.toldBefore(stepId, turn),
      ...(options.priced
        ? {
            price: (provider: string, model: string, response: ModelResponse) =>
              prices.cost(provider, model, response.usage),
          }
        : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    };
    const machine = compileFlow(config, {
      runStep: fromPromise<StepRunOutput, StepRunInput>(async ({ input, signal }) => {
        if (options.pipeline.remoteAgents.has(input.request.agent))
          return {
            ...(await remoteStep(recording, task.taskId, input.request, deps.publish)),
            durationMs: 0,
          };
        const agent = agents.get(input.request.agent);
        if (!agent) throw new Error(`agent ${input.request.agent} is not in pipeline ${config.name}`);
        // Token, cost and call budgets hold as recorded; the wall clock of the recorded run does not.
        const { budget, ...rest } = input.request;
        const { deadline: _deadline, ...untimed } = budget ?? { sources: {} };
        const request = budget ? { ...rest, budget: untimed } : rest;
        const step = startAgentStep(agent, request, deps);
        const stop = () => step.stop({ why: 'aborted' });
        signal.addEventListener('abort', stop, { once: true });
        try {
          return { ...(await step.reply), durationMs: 0 };
        } finally {
          signal.removeEventListener('abort', stop);
        }
      }),
    });
    const scope = { pipeline: config.name, taskId: task.taskId, traceparent: task.traceparent };
    const actor = createActor(machine, { input: task });
    actor.on('event', (emitted) => {
      const route = {
        ...(emitted.from === undefined ? {} : { from: emitted.from }),
        ...(emitted.to === undefined ? {} : { to: emitted.to }),
      };
      replayed.push(factory.make(emitted.kind, scope, emitted.data as never, route));
    });
    const cancel = () => actor.send({ type: 'cancel', reason: 'the run was cancelled' });
    options.signal?.addEventListener('abort', cancel, { once: true });
    actor.start();
    if (options.signal?.aborted) cancel();
    const output = await toPromise(actor).finally(() => options.signal?.removeEventListener('abort', cancel));
    const durationMs = Date.now() - started;
    replayed.push(
      output.status === 'completed'
        ? factory.make('task.completed', scope, {
            output: output.output,
            rounds: output.rounds,
            usage: output.usage,
            usageByAgent: output.usageByAgent,
            durationMs,
          })
        : output.status === 'failed'
          ? factory.make('task.failed', scope, {
              reason: output.failure?.reason ?? 'internal',
              message: output.failure?.message ?? '',
              usage: output.usage,
              durationMs,
            })
          : factory.make('task.cancelled', scope, { usage: output.usage }),
    );
    const status = output.status === 'released' ? 'cancelled' : output.status;
    return { events: replayed, status, output: output.output };
  } finally {
    await rm(workspaceRoot, { recursive: true, force: true });
  }
}

/**
 * A remote agent's step as the recording had it (no remote agent is called offline). A task run under another id
 * than the recorded one (an eval case's) takes the recorded step of the same place in the flow, and tells its call
 * and result as its own.
 */
async function remoteStep(
  recording: Recording,
  taskId: string,
  request: AgentStepRequest,
  publish: (event: TroupeEvent) => void,
): Promise<AgentStepReply> {
  if (taskId === recording.taskId || !request.stepId.startsWith(taskId))
    return recordedRemoteStep(recording.events, request, publish);
  const stepId = request.stepId;
  const recordedId = recording.taskId + stepId.slice(taskId.length);
  const reply = await recordedRemoteStep(recording.events, { ...request, stepId: recordedId }, (event) =>
    publish({ ...event, taskId, data: { ...event.data, stepId } } as TroupeEvent),
  );
  return { ...reply, stepId };
}

/**
 * Tools under the pipeline's tool names that answer with what the recorded call of the same id returned, or fail
 * as it failed. Arguments are checked against the built-in tool's schema where there is one, as when it ran.
 */
export function recordedTools(
  recording: Recording,
  config: LoadedPipeline['config'],
  which: (name: string) => boolean = () => true,
  values?: ValueReader,
): ToolRegistry {
  const real = builtinTools();
  const registry = new ToolRegistry();
  const names = new Set(Object.values(config.agents).flatMap((agent) => agent.tools));
  for (const name of [...names].filter(which)) {
    const tool = real.get(name);
    registry.register({
      name,
      description: tool?.description ?? `${name}, as the recorded run's calls answered`,
      input: tool?.input ?? z.record(z.string(), z.unknown()),
      run: async (_input, context) => {
        const result = recording.resultOfCall(context.callId);
        if (!result) {
          throw new ToolError('not_found', `the recorded run made no ${name} call ${context.callId}`);
        }
        if (!result.data.ok) {
          const code = (result.data.error?.code ?? 'failed') as ToolErrorCode;
          throw new ToolError(code, result.data.error?.message ?? result.data.output);
        }
        // A result too large for its event is read whole from the object store, where the run kept it.
        const ref = result.data.outputRef;
        return ref && values ? values.read(ref) : result.data.output;
      },
    });
  }
  return registry;
}
