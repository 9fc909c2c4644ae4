import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { ModelDelta, ModelObserver, ModelResponse, ToolCall, Usage } from '@troupe/llm';
import {
  type AgentStepReply,
  type AgentStepRequest,
  type ApprovalDecision,
  type ConversationSummary,
  isStepErrorCode,
  type ModelReply,
  type StepError,
  type StepErrorCode,
  type ToolResult,
  type TroupeEvent,
} from '@troupe/protocol';
import { createActor, toPromise } from 'xstate';
import type { HumanGate, HumanRequestOptions, HumanScope, WaitingOn } from '../approvals/humanGate.ts';
import { StepJournal, type ToolCallRecord } from '../durable/stepJournal.ts';
import type { Clock } from '../events/clock.ts';
import { type EventFactory, type EventScope, preview } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { KvMemory } from '../memory/memoryStore.ts';
import { ToolExecutor } from '../tools/toolExecutor.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { AgentDefinition } from './agentDefinition.ts';
import {
  type AgentEmitted,
  type AgentOutput,
  type AgentServices,
  type ApprovalAsk,
  agentMachine,
  type CompactionInput,
  type ModelCallInput,
} from './agentMachine.ts';
import { DeltaBatcher } from './deltaBatcher.ts';
import { ModelToolNames } from './modelToolNames.ts';
import { RecordedReplies } from './recordedReplies.ts';
import { buildStepMessages } from './stepPrompt.ts';
import { stepTimeoutError } from './stepTimeout.ts';

/** What a step needs from the world. */
export interface StepDeps {
  registry: ToolRegistry;
  /** Each task gets `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  clock: Clock;
  events: EventFactory;
  publish(event: TroupeEvent): void;
  /** Task and agent memory for the `remember` and `recall` tools. */
  memory?: KvMemory;
  /**
   * Where model replies, summaries, tool results and approvals are recorded, so a step run again after a crash
   * (here or on another worker) goes on from its records: no model turn asked twice, no tool call run twice.
   */
  journal?: StepJournal;
  /** Where problems that must not fail the step are reported. */
  logger?: Logger;
  /** Where `ask` calls and `ask_human` questions go; without it, they are denied. */
  human?: HumanGate;
  /** Cost in USD of one call; zero when absent. */
  price?: (provider: string, model: string, response: ModelResponse) => number;
  /** Told when the step starts (true) and stops (false) waiting on its model's reply. */
  modelWait?: (stepId: string, waiting: boolean) => void;
  signal?: AbortSignal;
}

/** A model call, with the host told while the step waits on it: a long wait parks the task. */
async function waitingOnModel<T>(deps: StepDeps, stepId: string, call: () => Promise<T>): Promise<T> {
  deps.modelWait?.(stepId, true);
  try {
    return await call();
  } finally {
    deps.modelWait?.(stepId, false);
  }
}

/** The directory a task's file tools are confined to. */
export const taskWorkspace = (root: string, pipeline: string, taskId: string): string =>
  join(root, pipeline, taskId);

/** Runs one step of an agent to its end and returns the reply for the workflow. Never throws. */
export async function runAgentStep(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
): Promise<AgentStepReply> {
  if (deps.signal?.aborted)
    return failedReply(request.stepId, 'aborted', `step ${request.stepId} was aborted before it started`);
  const deadline = request.budget?.deadline;
  const outOfTime = () => deadline !== undefined && deps.clock.now() >= deadline;
  if (outOfTime()) return outOfTimeReply(request, deps);
  let actor: Awaited<ReturnType<typeof startActor>> | undefined;
  /** Whom the step waited on when it was stopped: a timeout then is a person's, not the agent's. */
  let waitingAtStop: WaitingOn | undefined;
  /**
   * Aborted, with the reason, before the actor is stopped: XState aborts what the actor invoked without one, and
   * what waits on a person records why it stopped waiting (the task ended, the step ran out of time, …).
   */
  const stopped = new AbortController();
  const stop = (reason: unknown) => {
    waitingAtStop ??= deps.human?.waitingOn?.(request.stepId);
    if (!stopped.signal.aborted) stopped.abort(reason);
    actor?.stop();
  };
  const onAbort = () => stop(deps.signal?.reason);
  deps.signal?.addEventListener('abort', onAbort, { once: true });
  // The task's wall-clock budget stops a model call or tool in flight, not just the next one.
  const timer =
    deadline === undefined
      ? undefined
      : deps.clock.setTimeout(
          () => stop(Object.assign(new Error(timeBudgetMessage(request)), { name: 'BudgetExceeded' })),
          Math.max(0, deadline - deps.clock.now()),
        );
  try {
    const running = await startActor(agent, request, deps, stopped.signal);
    actor = running;
    if (deps.signal?.aborted || outOfTime()) running.stop();
    const output = await toPromise(running);
    if (output === undefined) {
      // A stopped actor has no output: aborted, or out of time; report what it had spent by then.
      const spent = running.getSnapshot().context;
      // Stopped by the budget's timer (read from the stop's reason, not the clock, which may read a hair early).
      if (outOfTime() || (stopped.signal.reason as Error | undefined)?.name === 'BudgetExceeded') {
        return abortedReply(request.stepId, spent, {
          code: 'budget_exceeded',
          message: timeBudgetMessage(request),
        });
      }
      const timedOut = isTimeout(deps.signal?.reason) && request.timeoutMs !== undefined;
      return timedOut
        ? abortedReply(
            request.stepId,
            spent,
            stepTimeoutError(agent.name, request.timeoutMs ?? 0, waitingAtStop),
          )
        : abortedReply(request.stepId, spent);
    }
    return toReply(request.stepId, output);
  } catch (error) {
    if (deps.signal?.aborted)
      return failedReply(request.stepId, 'aborted', `step ${request.stepId} was aborted`);
    const code = (error as { code?: unknown }).code;
    return failedReply(
      request.stepId,
      isStepErrorCode(code) ? code : 'agent_crashed',
      (error as Error).message,
    );
  } finally {
    deps.clock.clearTimeout(timer);
    deps.signal?.removeEventListener('abort', onAbort);
  }
}

const SUMMARY_INSTRUCTIONS =
  'Summarize the conversation below for the agent that will continue it: what was asked, what was done ' +
  '(tool calls and their results, files written), what was decided, and what is still open. Be factual and ' +
  'concise; keep names, paths, numbers and errors exactly. Reply with the summary only.';

/** Asks the agent's own model to condense older turns, so the conversation fits its context budget again. */
async function summarize(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
  input: CompactionInput,
  signal: AbortSignal,
): Promise<ConversationSummary> {
  const key = StepJournal.compactionKey(request.stepId, input.index);
  const journal = deps.journal;
  const recorded = await bestEffort(deps, request, 'read the journaled summary', () =>
    journal?.compaction(key, input.messages),
  );
  if (recorded) return recorded;
  const transcript = input.messages
    .map((m) => {
      if (m.role === 'tool') return `[tool ${m.name} result${m.isError ? ' (error)' : ''}] ${m.content}`;
      if (m.role === 'assistant' && m.toolCalls?.length) {
        return `[assistant] ${m.content} ${m.toolCalls.map((c) => `(calls ${c.name} ${c.arguments})`).join(' ')}`;
      }
      return `[${m.role}] ${m.content}`;
    })
    .join('\n');
  const response = await waitingOnModel(deps, request.stepId, () =>
    agent.model.complete({
      messages: [
        { role: 'system', content: SUMMARY_INSTRUCTIONS },
        { role: 'user', content: transcript },
      ],
      tools: [],
      context: callContext(agent, request, input.callsBefore),
      signal,
    }),
  );
  if (response.content.trim() === '') throw new Error('the model returned an empty summary');
  const provider = response.provider ?? agent.model.provider;
  const result: ConversationSummary = {
    summary: response.content,
    usage: response.usage,
    costUsd: deps.price?.(provider, response.model, response) ?? 0,
  };
  await bestEffort(deps, request, 'journal the summary', () =>
    journal?.recordCompaction(key, input.messages, result, new Date(deps.clock.now())),
  );
  return result;
}

/**
 * Runs a call unless the journal shows it already ran (the step is running again after a crash): then its
 * recorded result stands in, marked `journaled`, and nothing runs twice. The call is claimed in the journal
 * before it runs and its result recorded before the agent moves on. A call that was claimed and never
 * recorded (its process died mid-call) is in doubt: it runs again only when its tool is safe to repeat;
 * otherwise the model is told it may or may not have taken effect. Returns the result with what the claim found.
 */
async function runOnce(
  executor: ToolExecutor,
  deps: StepDeps,
  claim: { key: string; run: string; expectNew: boolean },
  call: ToolCall,
  signal: AbortSignal,
  approval: ApprovalDecision | undefined,
): Promise<{ result: ToolResult; claimed: ToolCallRecord['state'] | undefined }> {
  const journal = deps.journal;
  const now = () => new Date(deps.clock.now());
  const { key, run } = claim;
  const record = await unlessUnavailable(() =>
    journal?.claimToolCall(key, call.name, call.arguments, run, now(), { expectNew: claim.expectNew }),
  );
  if (record?.state === 'done') {
    const { error, truncated, ...rest } = record.result;
    const result: ToolResult = {
      ...rest,
      ...(error ? { error } : {}),
      ...(truncated ? { truncated } : {}),
      callId: call.id,
      tool: call.name,
      durationMs: 0,
      journaled: true,
    };
    return { result, claimed: record.state };
  }
  if (record?.state === 'in_doubt' && !deps.registry.get(call.name)?.rerunnable) {
    // All the journal knows: another run claimed the call and recorded no result. That run may have died, or may
    // still be running it (it was thought dead: its heartbeats did not arrive).
    const message =
      `another run of this step claimed this ${call.name} call (at ${record.startedAt ?? 'an unknown time'}) ` +
      'and has not recorded its result; whether it finished is unknown, so it was not run again here. ' +
      'Check its effect before repeating it.';
    // The model sees a tool result's output: the explanation goes there, as for every other tool error.
    const result: ToolResult = {
      callId: call.id,
      tool: call.name,
      ok: false,
      output: message,
      decision: approval?.decision ?? 'allow',
      error: { code: 'in_doubt', message },
      durationMs: 0,
    };
    await unlessUnavailable(() => journal?.recordToolResult(key, call.arguments, result, now()));
    return { result, claimed: record.state };
  }
  const result = await executor.execute(call, signal, approval);
  if (journal && !signal.aborted)
    await unlessUnavailable(() => journal.recordToolResult(key, call.arguments, result, now()));
  return { result, claimed: record?.state };
}

/**
 * A journal that cannot be reached (after its retries) must not end the task: the step fails with
 * `journal_unavailable`, which the workflow answers by sending the step again later; the run that resumes it
 * finds what was recorded.
 */
async function unlessUnavailable<T>(op: () => Promise<T> | undefined): Promise<T | undefined> {
  try {
    return await op();
  } catch (error) {
    throw Object.assign(new Error(`the step journal cannot be reached: ${(error as Error).message}`), {
      code: 'journal_unavailable',
      cause: error,
    });
  }
}

/** `AbortSignal.timeout` aborts with a `TimeoutError`. */
const isTimeout = (reason: unknown): boolean => reason instanceof Error && reason.name === 'TimeoutError';

/**
 * The task ran out of time before this run of the step began (it resumed after its deadline): nothing runs, and
 * the reply counts what earlier runs of the step had spent, as the journal recorded it.
 */
async function outOfTimeReply(request: AgentStepRequest, deps: StepDeps): Promise<AgentStepReply> {
  const reply = failedReply(request.stepId, 'budget_exceeded', timeBudgetMessage(request));
  const spent = await bestEffort(deps, request, 'read what earlier runs spent', () =>
    deps.journal?.spent(request.stepId),
  );
  return spent ? { ...reply, usage: spent } : reply;
}

function timeBudgetMessage(request: AgentStepRequest): string {
  const source = request.budget?.sources.deadline ?? 'the task wall-clock budget';
  return `agent ${request.agent}: ${source} ran out; the step was stopped`;
}

async function startActor(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
  stopped: AbortSignal,
) {
  const replies = new RecordedReplies(deps.journal, request.stepId, request.fresh === true);
  /** What the actor invoked is aborted when the step is stopped, with the step's reason. */
  const withReason = (signal: AbortSignal) => AbortSignal.any([stopped, signal]);
  const workspace = taskWorkspace(deps.workspaceRoot, request.pipeline, request.taskId);
  // Only tools use the workspace: an agent without any never makes it. (The journal's first read is under way.)
  if (agent.tools.length > 0) await mkdir(workspace, { recursive: true });
  const scope = scopeOf(request);
  const human = deps.human;
  /**
   * The turn each tool call was asked for in, and its position in it, for its progress events and the journal key
   * of the questions it asks.
   */
  const callTurns = new Map<string, { turn: number; index: number }>();
  /** The journal key of the questions a tool call asks; undefined for a call this run has not started. */
  const questionKey = (callId: string | undefined): string | undefined => {
    const at = callTurns.get(callId ?? '');
    return at === undefined
      ? undefined
      : StepJournal.humanKey(StepJournal.toolKey(request.stepId, at.turn, at.index), 'question');
  };
  /** This run of the step, as the journal knows its claims. */
  const run = randomUUID();
  const humanScope: HumanScope = {
    ...scope,
    agent: agent.name,
    stepId: request.stepId,
    ...(agent.approvalTimeoutMs === undefined ? {} : { timeoutMs: agent.approvalTimeoutMs }),
  };
  const executor = new ToolExecutor({
    registry: deps.registry,
    policy: { tools: agent.tools, rules: agent.rules },
    agent: agent.name,
    workspace,
    taskId: request.taskId,
    onProgress: (callId, tool, update) => {
      // Progress that cannot be published is lost, never the call.
      try {
        deps.publish(
          deps.events.make(
            'tool.progress',
            scope,
            {
              agent: agent.name,
              stepId: request.stepId,
              ...callTurns.get(callId),
              callId,
              tool,
              ...update,
            },
            { from: `tool:${tool}`, to: agent.name },
          ),
        );
      } catch (error) {
        deps.logger?.error(
          { err: error, stepId: request.stepId },
          'cannot publish tool.progress; the step goes on',
        );
      }
    },
    ...(human
      ? {
          human: {
            ask: (question, signal, callId) =>
              askOnce(deps.journal, questionKey(callId), deps.clock, (options) =>
                human.ask(question, humanScope, withReason(signal), options),
              ),
          },
        }
      : {}),
    ...(deps.memory
      ? {
          memory: deps.memory.view({
            pipeline: request.pipeline,
            agent: agent.name,
            taskId: request.taskId,
            longTerm: agent.longTermMemory === true,
          }),
        }
      : {}),
  });
  const services: AgentServices = {
    callModel: (input, signal) => callModel(agent, request, deps, replies, input, signal),
    compactConversation: (input, signal) => summarize(agent, request, deps, input, signal),
    checkTools: (input) => Promise.all(input.calls.map((call) => executor.check(call))),
    awaitApprovals: async (input, signal) => {
      const decide = async (ask: ApprovalAsk): Promise<[string, ApprovalDecision]> => [
        ask.callId,
        human
          ? await askOnce(
              deps.journal,
              StepJournal.humanKey(StepJournal.toolKey(request.stepId, input.turn, ask.index), 'approval'),
              deps.clock,
              (options) => human.approve(ask, humanScope, withReason(signal), options),
            )
          : { decision: 'deny', reason: 'nobody can approve calls here' },
      ];
      return Object.fromEntries(await Promise.all(input.calls.map(decide)));
    },
    runTools: async (input, signal) => {
      const ran = await Promise.all(
        input.calls.map((call, index) => {
          const key = StepJournal.toolKey(request.stepId, input.turn, index);
          callTurns.set(call.id, { turn: input.turn, index });
          const expectNew = replies.madeHere(input.turn);
          return runOnce(executor, deps, { key, run, expectNew }, call, signal, input.approvals?.[call.id]);
        }),
      );
      if (ran.length > 0 && ran.every((call) => call.claimed === 'new')) replies.claimedAllNew(input.turn);
      return ran.map((call) => call.result);
    },
  };
  const actor = createActor(agentMachine, {
    clock: deps.clock,
    input: {
      services,
      agent: agent.name,
      stepId: request.stepId,
      messages: buildStepMessages(agent.instructions, request),
      tools: deps.registry.definitions(agent.tools),
      maxTurns: agent.maxTurns,
      expect: request.expect,
      ...(request.budget ? { budget: request.budget } : {}),
      ...(agent.contextTokens === undefined ? {} : { contextTokens: agent.contextTokens }),
      ...(agent.outputSchema && request.expect === 'text' ? { outputSchema: agent.outputSchema } : {}),
    },
  });
  actor.on('*', (emitted) => {
    // An event that cannot be made or sent must not take the process down (xstate rethrows listener errors).
    try {
      deps.publish(toWireEvent(emitted, agent, request, scope, deps.events));
    } catch (error) {
      deps.logger?.error(
        { err: error, stepId: request.stepId },
        `cannot publish ${emitted.type}; the step goes on`,
      );
    }
  });
  actor.start();
  return actor;
}

async function callModel(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
  replies: RecordedReplies,
  input: ModelCallInput,
  signal: AbortSignal,
): Promise<ModelReply> {
  const key = StepJournal.modelKey(request.stepId, input.turn);
  const journal = deps.journal;
  const recorded = await bestEffort(deps, request, 'read the journaled model reply', () =>
    replies.find(input.turn, input.messages),
  );
  if (recorded) return { ...recorded, journaled: true };
  const result = await askModel(agent, request, deps, input, signal);
  const standing = await bestEffort(deps, request, 'journal the model reply', () =>
    journal?.recordModelReply(key, input.messages, result, new Date(deps.clock.now())),
  );
  if (standing?.journaled) replies.tookRecorded(input.turn);
  return standing ?? result;
}

/**
 * A model reply or summary the journal cannot read or record (NATS unreachable after retries) costs only a
 * repeated model call if the step runs again; the step goes on, and says so in the log.
 */
async function bestEffort<T>(
  deps: StepDeps,
  request: AgentStepRequest,
  what: string,
  op: () => Promise<T> | undefined,
): Promise<T | undefined> {
  try {
    return await op();
  } catch (error) {
    deps.logger?.warn({ err: error, stepId: request.stepId }, `cannot ${what}; the step goes on`);
    return undefined;
  }
}

async function askModel(
  agent: AgentDefinition,
  request: AgentStepRequest,
  deps: StepDeps,
  input: ModelCallInput,
  signal: AbortSignal,
): Promise<ModelReply> {
  const started = deps.clock.now();
  const scope = scopeOf(request);
  const ref = { agent: agent.name, stepId: request.stepId, turn: input.turn };
  const batcher = agent.stream
    ? new DeltaBatcher({
        emit: (batch) =>
          deps.publish(
            deps.events.make(
              'llm.delta',
              scope,
              {
                ...ref,
                seq: batch.seq,
                text: batch.text,
                ...(batch.toolCalls.length > 0 ? { toolCalls: batch.toolCalls } : {}),
              },
              { from: `${agent.model.provider}:${agent.model.model}`, to: agent.name },
            ),
          ),
      })
    : undefined;
  const observer: ModelObserver = {
    ...(batcher ? { onDelta: (delta: ModelDelta) => batcher.add(delta) } : {}),
    onRetry: (info) => {
      batcher?.flush();
      deps.publish(
        deps.events.make(
          'llm.retry',
          scope,
          { ...ref, ...info },
          { from: `${info.provider}:${info.model}`, to: agent.name },
        ),
      );
    },
    onFallback: (info) => {
      // Deltas of the model that failed go out before the fallback is announced.
      batcher?.flush();
      deps.publish(
        deps.events.make('llm.fallback', scope, { ...ref, ...info }, { from: info.from, to: info.to }),
      );
    },
  };
  const names = new ModelToolNames(input.tools);
  try {
    const reply = await waitingOnModel(deps, request.stepId, () =>
      agent.model.complete({
        messages: names.identity ? input.messages : names.messages(input.messages),
        tools: names.identity ? input.tools : names.tools(input.tools),
        context: callContext(agent, request, input.callsBefore),
        signal,
        observer,
        ...(agent.stream ? { stream: true } : {}),
        ...(input.responseSchema ? { responseSchema: input.responseSchema } : {}),
        ...(agent.temperature === undefined ? {} : { temperature: agent.temperature }),
        ...(agent.maxTokens === undefined ? {} : { maxTokens: agent.maxTokens }),
      }),
    );
    const response = names.identity ? reply : names.response(reply);
    const provider = response.provider ?? agent.model.provider;
    return {
      content: response.content,
      toolCalls: response.toolCalls,
      usage: response.usage,
      costUsd: deps.price?.(provider, response.model, response) ?? 0,
      finishReason: response.finishReason,
      provider,
      model: response.model,
      durationMs: Math.max(0, deps.clock.now() - started),
    };
  } finally {
    batcher?.flush();
  }
}

/** Who is calling; numbers the call within the task when the workflow said how many came before the step. */
const callContext = (agent: AgentDefinition, request: AgentStepRequest, callsBefore: number) => ({
  taskId: request.taskId,
  pipeline: request.pipeline,
  agent: agent.name,
  stepId: request.stepId,
  ...(request.priorModelCalls === undefined ? {} : { call: request.priorModelCalls + callsBefore }),
});

/**
 * Journals the id of what a person is asked about a tool call when it is asked, so a run of the step that
 * resumes after a crash waits on the same approval or question — and takes a decision that was recorded while
 * no process waited — instead of asking again.
 */
async function askOnce<T>(
  journal: StepJournal | undefined,
  key: string | undefined,
  clock: Clock,
  ask: (options: HumanRequestOptions) => Promise<T>,
): Promise<T> {
  if (!journal || key === undefined) return ask({});
  const id = await unlessUnavailable(() => journal.humanRequest(key));
  return ask({
    ...(id === undefined ? {} : { id }),
    onAsked: async (requestId) => {
      await unlessUnavailable(() => journal.recordHumanRequest(key, requestId, new Date(clock.now())));
    },
  });
}

const scopeOf = (request: AgentStepRequest): EventScope => ({
  pipeline: request.pipeline,
  taskId: request.taskId,
  traceparent: request.traceparent ?? '',
});

function toReply(stepId: string, output: AgentOutput): AgentStepReply {
  const usage = {
    ...output.usage,
    costUsd: output.costUsd,
    modelCalls: output.turns + output.compactions,
  };
  if (!output.ok || output.failure) {
    return {
      ok: false,
      stepId,
      error: output.failure ?? { code: 'failed', message: 'agent failed' },
      usage,
      turns: output.turns,
    };
  }
  return {
    ok: true,
    stepId,
    output: output.output,
    ...(output.verdict ? { verdict: output.verdict } : {}),
    ...(output.structured === undefined ? {} : { structured: output.structured }),
    usage,
    turns: output.turns,
  };
}

function abortedReply(
  stepId: string,
  spent: { turn: number; compactions: number; usage: Usage; costUsd: number },
  error: StepError = {
    code: 'aborted',
    message: `step ${stepId} was aborted after ${spent.turn} model call(s)`,
  },
): AgentStepReply {
  return {
    ok: false,
    stepId,
    error,
    usage: { ...spent.usage, costUsd: spent.costUsd, modelCalls: spent.turn + spent.compactions },
    turns: spent.turn,
  };
}

export function failedReply(stepId: string, code: StepErrorCode, message: string): AgentStepReply {
  return {
    ok: false,
    stepId,
    error: { code, message },
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    turns: 0,
  };
}

function toWireEvent(
  emitted: AgentEmitted,
  agent: AgentDefinition,
  request: AgentStepRequest,
  scope: EventScope,
  events: EventFactory,
): TroupeEvent {
  const ref = { agent: agent.name, stepId: request.stepId };
  const model = { provider: agent.model.provider, model: agent.model.model };
  const modelName = `${model.provider}:${model.model}`;
  const toModel = { from: agent.name, to: modelName };
  const fromModel = { from: modelName, to: agent.name };
  switch (emitted.type) {
    case 'llm.request':
      return events.make(
        'llm.request',
        scope,
        { ...ref, turn: emitted.turn, ...model, messages: emitted.messages, tools: emitted.tools },
        toModel,
      );
    case 'llm.response':
      return events.make(
        'llm.response',
        scope,
        {
          ...ref,
          turn: emitted.turn,
          provider: emitted.provider,
          model: emitted.model,
          usage: emitted.usage,
          costUsd: emitted.costUsd,
          finishReason: emitted.finishReason,
          content: preview(emitted.content),
          toolCalls: emitted.toolCalls.map((c) => ({ id: c.id, name: c.name })),
          durationMs: emitted.durationMs,
          ...(emitted.journaled ? { journaled: true } : {}),
        },
        // The model that answered: a fallback, when the primary kept failing.
        { from: `${emitted.provider}:${emitted.model}`, to: agent.name },
      );
    case 'llm.error':
      return events.make(
        'llm.error',
        scope,
        { ...ref, turn: emitted.turn, ...model, code: emitted.code, message: emitted.message },
        fromModel,
      );
    case 'context.compacted': {
      const { type: _type, summary, ...counts } = emitted;
      return events.make(
        'context.compacted',
        scope,
        { ...ref, ...counts, summary: preview(summary) },
        { from: agent.name, to: agent.name },
      );
    }
    case 'tool.call':
      return events.make(
        'tool.call',
        scope,
        {
          ...ref,
          turn: emitted.turn,
          index: emitted.index,
          callId: emitted.callId,
          tool: emitted.tool,
          arguments: preview(emitted.arguments),
        },
        { from: agent.name, to: `tool:${emitted.tool}` },
      );
    case 'tool.result': {
      const { type: _type, output, ...rest } = emitted;
      return events.make(
        'tool.result',
        scope,
        { ...ref, ...rest, output: preview(output) },
        { from: `tool:${emitted.tool}`, to: agent.name },
      );
    }
  }
}
