import type { ChatMessage, ToolCall, ToolDefinition, Usage } from '@troupe/llm';
import { addUsage, zeroUsage } from '@troupe/llm';
import {
  type ApprovalDecision,
  type ConversationSummary,
  errorMessage,
  isStepErrorCode,
  type ModelReply,
  type StepBudget,
  type StepErrorCode,
  type StepExpect,
  type TaskEnding,
  type ToolResult,
  type Verdict,
} from '@troupe/protocol';
import { and, assign, emit, enqueueActions, fromPromise, not, setup } from 'xstate';
import type { ApprovalAsk } from '../approvals/approvalAsk.ts';
import type { WaitingOn } from '../approvals/humanGate.ts';
import { compacted, estimateTokens, olderTurns } from './compaction.ts';
import { spentBudget, timeBudgetMessage } from './stepBudget.ts';
import { stepTimeoutError } from './stepTimeout.ts';
import {
  MAX_REPAIRS,
  type OutputSpec,
  outputName,
  outputSchemaOf,
  parseStructured,
  repairPrompt,
  responseSchemaOf,
} from './structuredReply.ts';

export type { ApprovalAsk, OutputSpec };

/** The policy's word on one call before it runs. */
export interface CallDecision {
  callId: string;
  tool: string;
  decision: 'allow' | 'deny' | 'ask';
  reason: string;
}

export interface RunToolsInput {
  calls: readonly ToolCall[];
  turn: number;
  approvals?: Readonly<Record<string, ApprovalDecision>>;
}

export interface AgentMachineInput {
  agent: string;
  stepId: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  /** The most model calls the agent may make in this step. */
  maxTurns: number;
  /** `verdict`: the reply must be a reviewer's verdict. */
  expect: StepExpect;
  /** What the step may still spend; checked before each model call. */
  budget?: StepBudget;
  /** Milliseconds until the task's wall-clock budget runs out (its `budget.deadline`), from the actor's start. */
  timeLeftMs?: number;
  /** Milliseconds the step may run (the request's `timeoutMs`), from the actor's start. */
  timeoutMs?: number;
  /** Estimated tokens the conversation may hold; past it, older turns are summarized by the model. */
  contextTokens?: number;
  /** A JSON Schema the final reply must match (the agent's declared `output`); asked of the provider natively. */
  outputSchema?: OutputSpec;
  /** Does the step's model calls and tool calls; see {@link AgentServices}. */
  services?: AgentServices;
  /**
   * The step's task is paused: the step stops at its next call boundary (see the `pause` event), and its time limits
   * no longer stop it.
   */
  paused?: boolean;
}

/**
 * Why a step stops before its end. The host sends `task_ended` (the task's final event arrived), `orphaned` (no
 * requester has listened for a while) and `worker_stopping`; a library caller may send `aborted`. The actor stops
 * itself with `deadline` (the task's wall-clock budget ran out) and `step_timeout` (the request's `timeoutMs`).
 */
export type StepStop =
  | { why: 'task_ended'; taskId: string; ending: TaskEnding }
  | { why: 'orphaned' }
  | { why: 'worker_stopping' }
  | { why: 'aborted' }
  | { why: 'deadline' }
  | { why: 'step_timeout' };

/**
 * What the agent actor receives from outside: a stop, with its reason, or a pause of its task. A stop cuts short what
 * the step does now; a pause lets its model call or tool calls finish (a tool waiting on a person waits on), and
 * stops it at the next call boundary, before the model is asked again, failing `paused`: its journal holds all it
 * did, so the same step sent again after the task's resume goes on from there. From the pause on, neither the step's
 * timeout nor the task's deadline stops it (a person it waits on may answer late): the workflow that holds it decides
 * about time. Model replies and tool results arrive as its invocations end.
 */
export type AgentEvent = { type: 'stop'; stop: StepStop } | { type: 'pause' } | { type: 'halted' };

/**
 * The work an agent step invokes, given in the actor's input: one machine serves every step, with no `.provide()`
 * (which rebuilds the machine) per step. Each is called as a method of the object given (the host's is a
 * `StepServices`, whose methods need their `this`). Without `checkTools` every call may run (the executor still checks);
 * without `awaitApprovals` every `ask` call is denied. Tests may instead `.provide()` the actors themselves.
 */
export interface AgentServices {
  callModel(input: ModelCallInput, signal: AbortSignal): Promise<ModelCallOutput>;
  runTools(input: RunToolsInput, signal: AbortSignal): Promise<ToolResult[]>;
  /** Summarizes older turns (it calls the agent's model). */
  compactConversation(input: CompactionInput, signal: AbortSignal): Promise<ConversationSummary>;
  checkTools?(input: { calls: readonly ToolCall[] }): Promise<CallDecision[]>;
  awaitApprovals?(input: ApprovalsInput, signal: AbortSignal): Promise<Record<string, ApprovalDecision>>;
  /** Whom the step waits on now, if a person: a step timeout then is theirs (`approval_timeout`). */
  waitingOn?(): WaitingOn | undefined;
  /** Told of a stop before what the step invoked is stopped, so what waits on a person can record why. */
  stopping?(stop: StepStop): void;
}

/** The `ask` calls of a turn, waiting for a person. */
export interface ApprovalsInput {
  calls: ApprovalAsk[];
  turn: number;
}

export interface ModelCallInput {
  messages: ChatMessage[];
  tools: ToolDefinition[];
  turn: number;
  /** Model calls the agent made earlier in this step (turns and summaries). */
  callsBefore: number;
  responseSchema?: OutputSpec | undefined;
}

/**
 * A turn's model reply, with `told`: the user turns (messages people told the task) read into the conversation just
 * before the model was asked, which the reply answered. They join the conversation ahead of it.
 */
export type ModelCallOutput = ModelReply & { told?: ChatMessage[] };

export interface CompactionInput {
  /** The older turns to summarize. */
  messages: ChatMessage[];
  /** Which compaction of the step this is, from 1. */
  index: number;
  /** Model calls the agent made earlier in this step. */
  callsBefore: number;
}

/** What an invoked actor gets besides its own input: the step's services, when the input gave them. */
type Served<T> = T & { services?: AgentServices };

const servicesOf = (context: AgentContext): { services?: AgentServices } =>
  context.services ? { services: context.services } : {};

/** The step's services, which have `name`: each is called as a method of the object the input gave. */
function servicesWith<K extends keyof AgentServices>(
  input: Served<unknown>,
  name: K,
): AgentServices & Required<Pick<AgentServices, K>> {
  const services = input.services;
  if (services?.[name] === undefined) throw new Error(`${name} is not provided`);
  return services as AgentServices & Required<Pick<AgentServices, K>>;
}

export interface AgentFailure {
  code: StepErrorCode;
  message: string;
}

export interface AgentContext extends AgentMachineInput {
  turn: number;
  /** The policy's word on each pending call. */
  checks: readonly CallDecision[];
  /** A person's decision on each `ask` call, by call id. */
  approvals: Readonly<Record<string, ApprovalDecision>>;
  compactions: number;
  usage: Usage;
  costUsd: number;
  pendingCalls: readonly ToolCall[];
  repairs: number;
  output?: string;
  verdict?: Verdict;
  structured?: unknown;
  failure?: AgentFailure;
}

/** The result of an agent step: what `done`, `failed` or `stopped` leaves behind. */
export interface AgentOutput {
  ok: boolean;
  output: string;
  verdict?: Verdict;
  /** The reply parsed and validated, when an output schema was required. */
  structured?: unknown;
  failure?: AgentFailure;
  messages: ChatMessage[];
  turns: number;
  /** Model calls made to summarize the conversation. */
  compactions: number;
  usage: Usage;
  costUsd: number;
}

/** Events the agent emits for the outside world (the host turns them into wire events). */
export type AgentEmitted =
  | ({
      type: 'context.compacted';
      index: number;
      before: number;
      after: number;
      estimatedTokens: number;
    } & ConversationSummary)
  | { type: 'llm.request'; turn: number; messages: number; tools: string[] }
  | ({ type: 'llm.response'; turn: number } & ModelReply)
  | { type: 'llm.error'; turn: number; code: string; message: string }
  | { type: 'tool.call'; turn: number; index: number; callId: string; tool: string; arguments: string }
  | ({ type: 'tool.result'; turn: number; index: number } & ToolResult);

/**
 * No calls pending, nor checks or approvals of them: one frozen value each for every step's context that has none (a
 * context's values are replaced, never changed), rather than a new empty one per step, a parked step's included.
 */
const NO_CALLS: readonly ToolCall[] = Object.freeze([]);
const NO_CHECKS: readonly CallDecision[] = Object.freeze([]);
const NO_APPROVALS: Readonly<Record<string, ApprovalDecision>> = Object.freeze({});

/** Before any model call: a step whose budget is spent ends `budget_exceeded`, naming the limit. */
const stopWhenBudgetSpent = {
  guard: not('budgetLeft'),
  target: '#agent.failed',
  actions: {
    type: 'fail',
    params: ({ context }: { context: AgentContext }): AgentFailure => ({
      code: 'budget_exceeded',
      message: `agent ${context.agent}: ${spentBudget(context.budget, context)}; no further model call was made`,
    }),
  },
} as const;

/** At a call boundary: a step whose task was paused stops here, failing `paused` (see {@link AgentEvent}). */
const stopWhenPaused = {
  guard: 'pauseAsked',
  target: '#agent.stopped',
  actions: { type: 'fail', params: ({ context }: { context: AgentContext }) => pausedFailure(context) },
} as const;

/** Why a paused step stopped: not a failure, the workflow holds it and sends it again on resume. */
function pausedFailure(context: AgentContext): AgentFailure {
  return {
    code: 'paused',
    message: `step ${context.stepId} was paused after ${context.turn} model call(s): its task was paused; sent again on resume, it goes on from its journal`,
  };
}

/**
 * The delay of a step without a time limit. `after` raises an event whose delay is not a number at once, instead
 * of setting a timer, and the `timeLimited` guard then ignores it: no timer is held for the step's lifetime.
 */
const NO_TIME_LIMIT = undefined as unknown as number;

/** The nearer of the step's two time limits, from its start; undefined when it has neither. */
function timeLimit(context: AgentMachineInput): { ms: number; stop: StepStop } | undefined {
  const { timeLeftMs, timeoutMs } = context;
  if (timeLeftMs === undefined && timeoutMs === undefined) return undefined;
  if (timeoutMs === undefined || (timeLeftMs !== undefined && timeLeftMs <= timeoutMs)) {
    return { ms: timeLeftMs ?? 0, stop: { why: 'deadline' } };
  }
  return { ms: timeoutMs, stop: { why: 'step_timeout' } };
}

/** How a stopped step failed, by why it stopped; what it spent is in the output beside it. */
function stoppedFailure(context: AgentContext, stop: StepStop): AgentFailure {
  switch (stop.why) {
    case 'deadline':
      return { code: 'budget_exceeded', message: timeBudgetMessage(context.agent, context.budget) };
    case 'step_timeout':
      return stepTimeoutError(context.agent, context.timeoutMs ?? 0, context.services?.waitingOn?.());
    case 'worker_stopping':
      return { code: 'worker_stopped', message: `the worker serving ${context.agent} stopped mid-step` };
    default: {
      const because =
        stop.why === 'task_ended'
          ? ': its task has ended'
          : stop.why === 'orphaned'
            ? ': nobody waits for its reply any more'
            : '';
      return {
        code: 'aborted',
        message: `step ${context.stepId} was aborted after ${context.turn} model call(s)${because}`,
      };
    }
  }
}

/**
 * The agent actor: `thinking` (a model call) → `acting` (the tool calls it asked for) → … → `done` | `failed`,
 * or `stopped` on a `stop` event or when its time runs out. A stop first tells the services why (so a person's
 * pending request records it), then leaves `working`, which stops what the step had invoked; the output says what
 * the step spent until then. Model and tools come from the input's {@link AgentServices} (or
 * `agentMachine.provide({ actors })` in tests), so the machine is pure and runs in memory in tests.
 */
export const agentMachine = setup({
  types: {
    context: {} as AgentContext,
    input: {} as AgentMachineInput,
    output: {} as AgentOutput,
    events: {} as AgentEvent,
    emitted: {} as AgentEmitted,
  },
  actors: {
    callModel: fromPromise<ModelCallOutput, Served<ModelCallInput>>(({ input, signal }) =>
      servicesWith(input, 'callModel').callModel(input, signal),
    ),
    runTools: fromPromise<ToolResult[], Served<RunToolsInput>>(({ input, signal }) =>
      servicesWith(input, 'runTools').runTools(input, signal),
    ),
    compactConversation: fromPromise<ConversationSummary, Served<CompactionInput>>(({ input, signal }) =>
      servicesWith(input, 'compactConversation').compactConversation(input, signal),
    ),
    checkTools: fromPromise<CallDecision[], Served<{ calls: readonly ToolCall[] }>>(async ({ input }) =>
      input.services?.checkTools
        ? input.services.checkTools(input)
        : input.calls.map((call) => ({
            callId: call.id,
            tool: call.name,
            decision: 'allow' as const,
            reason: '',
          })),
    ),
    awaitApprovals: fromPromise<Record<string, ApprovalDecision>, Served<ApprovalsInput>>(
      async ({ input, signal }) =>
        input.services?.awaitApprovals
          ? input.services.awaitApprovals(input, signal)
          : Object.fromEntries(
              input.calls.map((c) => [
                c.callId,
                { decision: 'deny' as const, reason: 'no approval channel is configured' },
              ]),
            ),
    ),
  },
  delays: {
    timeLimit: ({ context }) => timeLimit(context)?.ms ?? NO_TIME_LIMIT,
  },
  guards: {
    timeLimited: ({ context }) => timeLimit(context) !== undefined,
    failureDecided: ({ context }) => context.failure !== undefined,
    turnsLeft: ({ context }) => context.turn < context.maxTurns,
    pauseAsked: ({ context }) => context.paused === true,
    /** The reply asks for tools and the task was paused meanwhile: they run after the resume, not now. */
    pausedBeforeTools: ({ context }, reply: ModelReply) =>
      context.paused === true && reply.toolCalls.length > 0,
    overContext: ({ context }) =>
      context.contextTokens !== undefined &&
      estimateTokens(context.messages) > context.contextTokens &&
      olderTurns(context.messages).length > 0,
    budgetLeft: ({ context }) => spentBudget(context.budget, context) === undefined,
    wantsTools: (_, reply: ModelReply) => reply.toolCalls.length > 0,
    emptyReply: (_, reply: ModelReply) => reply.content.trim() === '',
    outputInvalid: ({ context }, reply: ModelReply) => {
      const schema = outputSchemaOf(context);
      return schema !== undefined && parseStructured(reply.content, schema) === undefined;
    },
    canRepair: ({ context }) => context.repairs < MAX_REPAIRS,
    needsApproval: (_, checks: CallDecision[]) => checks.some((c) => c.decision === 'ask'),
  },
  actions: {
    /**
     * Adds what was told before the model call and the model's reply to the conversation, and what it cost to the
     * step's, and announces the reply.
     */
    recordReply: enqueueActions(({ context, enqueue }, { told, ...reply }: ModelCallOutput) => {
      enqueue.assign({
        usage: addUsage(context.usage, reply.usage),
        costUsd: context.costUsd + reply.costUsd,
        messages: [
          ...context.messages,
          ...(told ?? []),
          {
            role: 'assistant' as const,
            content: reply.content,
            ...(reply.toolCalls.length > 0 ? { toolCalls: reply.toolCalls } : {}),
          },
        ],
        pendingCalls: reply.toolCalls,
      });
      enqueue.emit({ type: 'llm.response', turn: context.turn, ...reply });
    }),
    askForRepair: assign(({ context }) => ({
      repairs: context.repairs + 1,
      messages: [...context.messages, { role: 'user' as const, content: repairPrompt(context) }],
    })),
    finish: assign(({ context }, reply: ModelReply) => {
      const schema = outputSchemaOf(context);
      if (schema === undefined) return { output: reply.content };
      const structured = parseStructured(reply.content, schema);
      return {
        output: reply.content,
        structured,
        ...(context.expect === 'verdict' ? { verdict: structured as Verdict } : {}),
      };
    }),
    fail: assign((_, failure: AgentFailure) => ({ failure })),
    /**
     * The first half of a stop, taken without leaving any state: the failure is decided (a timeout asks whom the
     * step waits on, before that wait is stopped) and the services told; then `halted` leaves `working`.
     */
    halt: enqueueActions(({ context, enqueue }, stop: StepStop) => {
      enqueue.assign({ failure: stoppedFailure(context, stop) });
      enqueue(() => context.services?.stopping?.(stop));
      enqueue.raise({ type: 'halted' });
    }),
    recordChecks: assign((_, checks: CallDecision[]) => ({ checks })),
    recordApprovals: assign((_, approvals: Record<string, ApprovalDecision>) => ({ approvals })),
    recordToolResults: assign(({ context }, results: ToolResult[]) => ({
      pendingCalls: NO_CALLS,
      checks: NO_CHECKS,
      approvals: NO_APPROVALS,
      messages: [
        ...context.messages,
        ...results.map(
          (r): ChatMessage => ({
            role: 'tool',
            toolCallId: r.callId,
            name: r.tool,
            content: r.output,
            ...(r.ok ? {} : { isError: true }),
          }),
        ),
      ],
    })),
  },
}).createMachine({
  id: 'agent',
  context: ({ input }) => ({
    ...input,
    turn: 0,
    usage: zeroUsage(),
    costUsd: 0,
    pendingCalls: NO_CALLS,
    checks: NO_CHECKS,
    approvals: NO_APPROVALS,
    repairs: 0,
    compactions: 0,
  }),
  initial: 'working',
  states: {
    working: {
      initial: 'deciding',
      on: {
        stop: { actions: { type: 'halt', params: ({ event }) => event.stop } },
        pause: { actions: assign({ paused: true }) },
        // Raised by `halt` only, after the failure was decided; sent from outside without one, it is ignored.
        halted: { guard: 'failureDecided', target: 'stopped' },
      },
      after: {
        // Once its task is paused, the step's time limit fails it no more: it stops at its next call boundary, and the
        // workflow, which holds it, sends it again with the time left (or ends a task past its deadline) on resume.
        timeLimit: {
          guard: and(['timeLimited', not('pauseAsked')]),
          actions: {
            type: 'halt',
            params: ({ context }) => timeLimit(context)?.stop ?? { why: 'deadline' },
          },
        },
      },
      states: {
        deciding: {
          always: [
            stopWhenBudgetSpent,
            stopWhenPaused,
            { guard: and(['turnsLeft', 'overContext']), target: 'compacting' },
            { guard: 'turnsLeft', target: 'thinking' },
            {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context }) => ({
                  code: 'max_steps',
                  message: `agent ${context.agent} reached its limit of ${context.maxTurns} model calls without finishing`,
                }),
              },
            },
          ],
        },
        compacting: {
          invoke: {
            src: 'compactConversation',
            input: ({ context }) => ({
              messages: olderTurns(context.messages),
              index: context.compactions + 1,
              callsBefore: context.turn + context.compactions,
              ...servicesOf(context),
            }),
            onDone: {
              target: 'compacted',
              actions: [
                enqueueActions(({ context, event, enqueue }) => {
                  const messages = compacted(context.messages, event.output.summary);
                  enqueue.emit({
                    type: 'context.compacted',
                    index: context.compactions + 1,
                    before: context.messages.length,
                    after: messages.length,
                    estimatedTokens: estimateTokens(context.messages),
                    ...event.output,
                  });
                  enqueue.assign({
                    messages,
                    compactions: context.compactions + 1,
                    usage: addUsage(context.usage, event.output.usage),
                    costUsd: context.costUsd + event.output.costUsd,
                  });
                }),
              ],
            },
            onError: {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context, event }) =>
                  journalFailure(context, event.error) ?? {
                    code: 'compaction_failed',
                    message: `agent ${context.agent}: the conversation outgrew its context budget and could not be summarized: ${errorMessage(event.error)}`,
                  },
              },
            },
          },
        },
        /** The summary was a model call too: the budget is checked again before the next one. */
        compacted: {
          always: [stopWhenBudgetSpent, stopWhenPaused, { target: 'thinking' }],
        },
        thinking: {
          entry: [
            assign({ turn: ({ context }) => context.turn + 1 }),
            emit(({ context }) => ({
              type: 'llm.request' as const,
              turn: context.turn,
              messages: context.messages.length,
              tools: context.tools.map((t) => t.name),
            })),
          ],
          invoke: {
            src: 'callModel',
            input: ({ context }) => ({
              messages: context.messages,
              tools: context.tools,
              turn: context.turn,
              callsBefore: context.turn - 1 + context.compactions,
              ...(responseSchemaOf(context) ? { responseSchema: responseSchemaOf(context) } : {}),
              ...servicesOf(context),
            }),
            onDone: [
              {
                guard: { type: 'pausedBeforeTools', params: ({ event }) => event.output },
                target: '#agent.stopped',
                actions: [
                  { type: 'recordReply', params: ({ event }) => event.output },
                  { type: 'fail', params: ({ context }) => pausedFailure(context) },
                ],
              },
              {
                guard: { type: 'wantsTools', params: ({ event }) => event.output },
                target: 'acting',
                actions: [{ type: 'recordReply', params: ({ event }) => event.output }],
              },
              {
                guard: { type: 'emptyReply', params: ({ event }) => event.output },
                target: '#agent.failed',
                actions: [
                  { type: 'recordReply', params: ({ event }) => event.output },
                  {
                    type: 'fail',
                    params: ({ context }) => ({
                      code: 'empty_reply',
                      message: `agent ${context.agent}: the model returned an empty reply with no tool calls`,
                    }),
                  },
                ],
              },
              {
                guard: { type: 'outputInvalid', params: ({ event }) => event.output },
                target: 'repairing',
                actions: [{ type: 'recordReply', params: ({ event }) => event.output }],
              },
              {
                target: '#agent.done',
                actions: [
                  { type: 'recordReply', params: ({ event }) => event.output },
                  { type: 'finish', params: ({ event }) => event.output },
                ],
              },
            ],
            onError: {
              target: '#agent.failed',
              actions: [
                {
                  type: 'fail',
                  params: ({ context, event }) =>
                    journalFailure(context, event.error) ?? {
                      code: failureCode(event.error),
                      message: `agent ${context.agent}: model call failed: ${errorMessage(event.error)}`,
                    },
                },
                emit(({ context, event }) => ({
                  type: 'llm.error' as const,
                  turn: context.turn,
                  code: errorCode(event.error),
                  message: errorMessage(event.error),
                })),
              ],
            },
          },
        },
        repairing: {
          always: [
            { guard: 'canRepair', target: 'deciding', actions: 'askForRepair' },
            {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context }) => ({
                  code: 'invalid_output',
                  message: `agent ${context.agent}: the reply does not match the required ${outputName(context)} after ${MAX_REPAIRS} repair turn(s)${whyNotMatching(context)}`,
                }),
              },
            },
          ],
        },
        acting: {
          entry: enqueueActions(({ context, enqueue }) => {
            for (const [index, call] of context.pendingCalls.entries()) {
              enqueue.emit({
                type: 'tool.call',
                turn: context.turn,
                index,
                callId: call.id,
                tool: call.name,
                arguments: call.arguments,
              });
            }
          }),
          invoke: {
            src: 'checkTools',
            input: ({ context }) => ({ calls: context.pendingCalls, ...servicesOf(context) }),
            onDone: [
              {
                guard: { type: 'needsApproval', params: ({ event }) => event.output },
                target: 'awaitingApproval',
                actions: { type: 'recordChecks', params: ({ event }) => event.output },
              },
              { target: 'running', actions: { type: 'recordChecks', params: ({ event }) => event.output } },
            ],
            onError: {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context, event }) => toolRunnerFailed(context, event.error),
              },
            },
          },
        },
        awaitingApproval: {
          invoke: {
            src: 'awaitApprovals',
            input: ({ context }) => ({
              calls: askCalls(context),
              turn: context.turn,
              ...servicesOf(context),
            }),
            onDone: {
              target: 'running',
              actions: { type: 'recordApprovals', params: ({ event }) => event.output },
            },
            onError: {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context, event }) => toolRunnerFailed(context, event.error),
              },
            },
          },
        },
        running: {
          invoke: {
            src: 'runTools',
            input: ({ context }) => ({
              calls: context.pendingCalls,
              turn: context.turn,
              ...(Object.keys(context.approvals).length > 0 ? { approvals: context.approvals } : {}),
              ...servicesOf(context),
            }),
            onDone: {
              target: 'deciding',
              actions: [
                { type: 'recordToolResults', params: ({ event }) => event.output },
                enqueueActions(({ context, event, enqueue }) => {
                  for (const [index, result] of event.output.entries())
                    enqueue.emit({ type: 'tool.result', turn: context.turn, index, ...result });
                }),
              ],
            },
            onError: {
              target: '#agent.failed',
              actions: {
                type: 'fail',
                params: ({ context, event }) => toolRunnerFailed(context, event.error),
              },
            },
          },
        },
      },
    },
    done: { type: 'final' },
    failed: { type: 'final' },
    /** Stopped before its end (see {@link StepStop}), or at a call boundary after a pause; `failure` says why. */
    stopped: { type: 'final' },
  },
  output: ({ context }) => ({
    ok: context.failure === undefined,
    output: context.output ?? '',
    ...(context.verdict ? { verdict: context.verdict } : {}),
    ...(context.structured === undefined ? {} : { structured: context.structured }),
    ...(context.failure ? { failure: context.failure } : {}),
    messages: context.messages,
    turns: context.turn,
    compactions: context.compactions,
    usage: context.usage,
    costUsd: context.costUsd,
  }),
});

function askCalls(context: AgentContext): ApprovalAsk[] {
  return context.checks.flatMap((check) => {
    const index = context.pendingCalls.findIndex((c) => c.id === check.callId);
    const call = context.pendingCalls[index];
    return check.decision === 'ask' && call
      ? [{ callId: call.id, index, tool: call.name, arguments: call.arguments, reason: check.reason }]
      : [];
  });
}

function toolRunnerFailed(context: AgentContext, error: unknown): AgentFailure {
  return (
    journalFailure(context, error) ?? {
      code: 'tool_runner_failed',
      message: `agent ${context.agent}: the tool runner failed: ${errorMessage(error)}`,
    }
  );
}

/**
 * The journal out of reach, or holding a record only a newer host can read, is the step's circumstance, not its
 * failure, wherever the step met it (a model call, a summary, a tool call): `journal_unavailable`, which the workflow
 * sends again; undefined for any other error.
 */
function journalFailure(context: AgentContext, error: unknown): AgentFailure | undefined {
  if (errorCode(error) !== 'journal_unavailable') return undefined;
  return { code: 'journal_unavailable', message: `agent ${context.agent}: ${errorMessage(error)}` };
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : 'model_failed';
}

/** The step's code for a failed model call: the error's own when steps know it, else `model_failed`. */
function failureCode(error: unknown): StepErrorCode {
  const code = errorCode(error);
  return isStepErrorCode(code) ? code : 'model_failed';
}

/** What was wrong with the last reply a structured step got, for the message of its failure: `; target: …`. */
function whyNotMatching(context: AgentContext): string {
  const last = context.messages.at(-1);
  if (last?.role !== 'assistant') return '';
  const schema = outputSchemaOf(context);
  let value: unknown = last.content;
  try {
    value = JSON.parse(last.content);
  } catch {
    // Not JSON: the schema says what it wanted of the text.
  }
  const issue = schema?.safeParse(value).error?.issues[0];
  const where = issue ? `${issue.path.join('.') || 'the reply'}: ${issue.message}` : 'no JSON value in it';
  return `; ${where} (its last reply: ${JSON.stringify(last.content.slice(0, 200))})`;
}
