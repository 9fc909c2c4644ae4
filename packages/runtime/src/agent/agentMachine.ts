import type { ChatMessage, JsonSchema, ToolCall, ToolDefinition, Usage } from '@troupe/llm';
import { addUsage, zeroUsage } from '@troupe/llm';
import {
  type ApprovalDecision,
  type ConversationSummary,
  isStepErrorCode,
  type ModelReply,
  type StepBudget,
  type StepErrorCode,
  type StepExpect,
  type ToolResult,
  Verdict,
} from '@troupe/protocol';
import { and, assign, emit, enqueueActions, fromPromise, not, setup } from 'xstate';
import { z } from 'zod';
import type { ApprovalAsk } from '../approvals/approvalAsk.ts';

/** What the injected model actor returns for one call. */

/** The policy's word on one call before it runs. */
export interface CallDecision {
  callId: string;
  tool: string;
  decision: 'allow' | 'deny' | 'ask';
  reason: string;
}

export type { ApprovalAsk };

export interface RunToolsInput {
  calls: ToolCall[];
  turn: number;
  approvals?: Record<string, ApprovalDecision>;
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
  /** Estimated tokens the conversation may hold; past it, older turns are summarized by the model. */
  contextTokens?: number;
  /** A JSON Schema the final reply must match (the agent's declared `output`); asked of the provider natively. */
  outputSchema?: OutputSpec;
  /** Does the step's model calls and tool calls; see {@link AgentServices}. */
  services?: AgentServices;
}

/**
 * The work an agent step invokes, given in the actor's input: one machine serves every step, with no `.provide()`
 * (which rebuilds the machine) per step. Without `checkTools` every call may run (the executor still checks);
 * without `awaitApprovals` every `ask` call is denied. Tests may instead `.provide()` the actors themselves.
 */
export interface AgentServices {
  callModel(input: ModelCallInput, signal: AbortSignal): Promise<ModelReply>;
  runTools(input: RunToolsInput, signal: AbortSignal): Promise<ToolResult[]>;
  /** Summarizes older turns (it calls the agent's model). */
  compactConversation(input: CompactionInput, signal: AbortSignal): Promise<ConversationSummary>;
  checkTools?(input: { calls: ToolCall[] }): Promise<CallDecision[]>;
  awaitApprovals?(input: ApprovalsInput, signal: AbortSignal): Promise<Record<string, ApprovalDecision>>;
}

/** The `ask` calls of a turn, waiting for a person. */
export interface ApprovalsInput {
  calls: ApprovalAsk[];
  turn: number;
}

/** What an invoked actor gets besides its own input: the step's services, when the input gave them. */
type Served<T> = T & { services?: AgentServices };

const servicesOf = (context: AgentContext): { services?: AgentServices } =>
  context.services ? { services: context.services } : {};

function service<K extends keyof AgentServices>(
  input: Served<unknown>,
  name: K,
): NonNullable<AgentServices[K]> {
  const found = input.services?.[name];
  if (found === undefined) throw new Error(`${name} is not provided`);
  return found as NonNullable<AgentServices[K]>;
}

/** A structured reply the agent must give: a name for the provider and the JSON Schema it must match. */
export interface OutputSpec {
  name: string;
  schema: JsonSchema;
}

export interface AgentFailure {
  code: StepErrorCode;
  message: string;
}

interface AgentContext extends AgentMachineInput {
  turn: number;
  /** The policy's word on each pending call. */
  checks: CallDecision[];
  /** A person's decision on each `ask` call, by call id. */
  approvals: Record<string, ApprovalDecision>;
  compactions: number;
  usage: Usage;
  costUsd: number;
  pendingCalls: ToolCall[];
  repairs: number;
  output?: string;
  verdict?: Verdict;
  structured?: unknown;
  failure?: AgentFailure;
}

/** The result of an agent step: what `done` or `failed` leaves behind. */
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
/** What a compaction returns: the summary, and what the model call cost. */

export type AgentEmitted =
  | { type: 'context.compacted'; before: number; after: number; estimatedTokens: number; summary: string }
  | { type: 'llm.request'; turn: number; messages: number; tools: string[] }
  | ({ type: 'llm.response'; turn: number } & ModelReply)
  | { type: 'llm.error'; turn: number; code: string; message: string }
  | { type: 'tool.call'; turn: number; index: number; callId: string; tool: string; arguments: string }
  | ({ type: 'tool.result'; turn: number; index: number } & ToolResult);

/** Before any model call: a step whose budget is spent ends `budget_exceeded`, naming the limit. */
const stopWhenBudgetSpent = {
  guard: not('budgetLeft'),
  target: 'failed',
  actions: {
    type: 'fail',
    params: ({ context }: { context: AgentContext }): AgentFailure => ({
      code: 'budget_exceeded',
      message: `agent ${context.agent}: ${spentBudget(context)}; no further model call was made`,
    }),
  },
} as const;

/** A verdict is repaired at most this often before the step fails. */
const MAX_REPAIRS = 1;

/**
 * The agent actor: `thinking` (a model call) → `acting` (the tool calls it asked for) → … → `done` | `failed`.
 * Model and tools come from the input's {@link AgentServices} (or `agentMachine.provide({ actors })` in tests),
 * so the machine is pure and runs in memory in tests.
 */
export const agentMachine = setup({
  types: {
    context: {} as AgentContext,
    input: {} as AgentMachineInput,
    output: {} as AgentOutput,
    emitted: {} as AgentEmitted,
  },
  actors: {
    callModel: fromPromise<ModelReply, Served<ModelCallInput>>(({ input, signal }) =>
      service(input, 'callModel')(input, signal),
    ),
    runTools: fromPromise<ToolResult[], Served<RunToolsInput>>(({ input, signal }) =>
      service(input, 'runTools')(input, signal),
    ),
    compactConversation: fromPromise<ConversationSummary, Served<CompactionInput>>(({ input, signal }) =>
      service(input, 'compactConversation')(input, signal),
    ),
    checkTools: fromPromise<CallDecision[], Served<{ calls: ToolCall[] }>>(async ({ input }) =>
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
  guards: {
    turnsLeft: ({ context }) => context.turn < context.maxTurns,
    overContext: ({ context }) =>
      context.contextTokens !== undefined &&
      estimateTokens(context.messages) > context.contextTokens &&
      olderTurns(context.messages).length > 0,
    budgetLeft: ({ context }) => spentBudget(context) === undefined,
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
    recordReply: assign(({ context }, reply: ModelReply) => ({
      usage: addUsage(context.usage, reply.usage),
      costUsd: context.costUsd + reply.costUsd,
      messages: [
        ...context.messages,
        {
          role: 'assistant' as const,
          content: reply.content,
          ...(reply.toolCalls.length > 0 ? { toolCalls: reply.toolCalls } : {}),
        },
      ],
      pendingCalls: reply.toolCalls,
    })),
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
    recordChecks: assign((_, checks: CallDecision[]) => ({ checks })),
    recordApprovals: assign((_, approvals: Record<string, ApprovalDecision>) => ({ approvals })),
    recordToolResults: assign(({ context }, results: ToolResult[]) => ({
      pendingCalls: [],
      checks: [],
      approvals: {},
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
    pendingCalls: [],
    checks: [],
    approvals: {},
    repairs: 0,
    compactions: 0,
  }),
  initial: 'deciding',
  states: {
    deciding: {
      always: [
        stopWhenBudgetSpent,
        { guard: and(['turnsLeft', 'overContext']), target: 'compacting' },
        { guard: 'turnsLeft', target: 'thinking' },
        {
          target: 'failed',
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
                before: context.messages.length,
                after: messages.length,
                estimatedTokens: estimateTokens(context.messages),
                summary: event.output.summary,
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
          target: 'failed',
          actions: {
            type: 'fail',
            params: ({ context, event }) => ({
              code: 'compaction_failed',
              message: `agent ${context.agent}: the conversation outgrew its context budget and could not be summarized: ${errorMessage(event.error)}`,
            }),
          },
        },
      },
    },
    /** The summary was a model call too: the budget is checked again before the next one. */
    compacted: {
      always: [stopWhenBudgetSpent, { target: 'thinking' }],
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
            guard: { type: 'wantsTools', params: ({ event }) => event.output },
            target: 'acting',
            actions: [
              { type: 'recordReply', params: ({ event }) => event.output },
              emit(({ context, event }) => ({
                type: 'llm.response' as const,
                turn: context.turn,
                ...event.output,
              })),
            ],
          },
          {
            guard: { type: 'emptyReply', params: ({ event }) => event.output },
            target: 'failed',
            actions: [
              { type: 'recordReply', params: ({ event }) => event.output },
              emit(({ context, event }) => ({
                type: 'llm.response' as const,
                turn: context.turn,
                ...event.output,
              })),
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
            actions: [
              { type: 'recordReply', params: ({ event }) => event.output },
              emit(({ context, event }) => ({
                type: 'llm.response' as const,
                turn: context.turn,
                ...event.output,
              })),
            ],
          },
          {
            target: 'done',
            actions: [
              { type: 'recordReply', params: ({ event }) => event.output },
              { type: 'finish', params: ({ event }) => event.output },
              emit(({ context, event }) => ({
                type: 'llm.response' as const,
                turn: context.turn,
                ...event.output,
              })),
            ],
          },
        ],
        onError: {
          target: 'failed',
          actions: [
            {
              type: 'fail',
              params: ({ context, event }) => ({
                code: failureCode(event.error),
                message: `agent ${context.agent}: model call failed: ${errorMessage(event.error)}`,
              }),
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
          target: 'failed',
          actions: {
            type: 'fail',
            params: ({ context }) => ({
              code: 'invalid_output',
              message: `agent ${context.agent}: the reply does not match the required ${outputName(context)} after ${MAX_REPAIRS} repair turn(s)`,
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
          target: 'failed',
          actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
        },
      },
    },
    awaitingApproval: {
      invoke: {
        src: 'awaitApprovals',
        input: ({ context }) => ({ calls: askCalls(context), turn: context.turn, ...servicesOf(context) }),
        onDone: {
          target: 'running',
          actions: { type: 'recordApprovals', params: ({ event }) => event.output },
        },
        onError: {
          target: 'failed',
          actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
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
          target: 'failed',
          actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
        },
      },
    },
    done: { type: 'final' },
    failed: { type: 'final' },
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

/** Reads a verdict from a reply: the whole text, or the first JSON object in it that is one (models like code fences). */
export function parseVerdict(content: string): Verdict | undefined {
  return parseStructured(content, Verdict) as Verdict | undefined;
}

/** Reads a structured reply: the whole text as JSON, or the first JSON object in it that matches the schema. */
export function parseStructured(content: string, schema: z.ZodType): unknown {
  for (const candidate of [content.trim(), ...jsonObjects(content)]) {
    let value: unknown;
    try {
      value = JSON.parse(candidate);
    } catch {
      continue;
    }
    const parsed = schema.safeParse(value);
    if (parsed.success) return parsed.data;
  }
  return undefined;
}

/** Each balanced `{…}` span in the text, in order, skipping braces inside JSON strings. */
function* jsonObjects(text: string): Generator<string> {
  for (let start = text.indexOf('{'); start !== -1; start = text.indexOf('{', start + 1)) {
    const end = matchingBrace(text, start);
    if (end !== -1) yield text.slice(start, end + 1);
  }
}

function matchingBrace(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const char = text[i];
    if (inString) {
      if (char === '\\') i++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === '{') depth++;
    else if (char === '}' && --depth === 0) return i;
  }
  return -1;
}

export interface ModelCallInput {
  messages: ChatMessage[];
  tools: ToolDefinition[];
  turn: number;
  /** Model calls the agent made earlier in this step (turns and summaries). */
  callsBefore: number;
  responseSchema?: OutputSpec | undefined;
}

export interface CompactionInput {
  /** The older turns to summarize. */
  messages: ChatMessage[];
  /** Which compaction of the step this is, from 1. */
  index: number;
  /** Model calls the agent made earlier in this step. */
  callsBefore: number;
}

const VERDICT_SCHEMA: JsonSchema = (() => {
  const { $schema: _drop, ...schema } = z.toJSONSchema(Verdict, { io: 'input' }) as JsonSchema;
  return schema;
})();

/** zod schemas built from declared JSON Schemas, kept per schema object. */
const compiled = new WeakMap<JsonSchema, z.ZodType>();

function outputSchemaOf(context: AgentMachineInput): z.ZodType | undefined {
  if (context.expect === 'verdict') return Verdict;
  const spec = context.outputSchema;
  if (!spec) return undefined;
  let schema = compiled.get(spec.schema);
  if (!schema) {
    schema = z.fromJSONSchema(spec.schema as Parameters<typeof z.fromJSONSchema>[0]);
    compiled.set(spec.schema, schema);
  }
  return schema;
}

function responseSchemaOf(context: AgentMachineInput): OutputSpec | undefined {
  if (context.expect === 'verdict') return { name: 'verdict', schema: VERDICT_SCHEMA };
  return context.outputSchema;
}

const outputName = (context: AgentMachineInput): string =>
  context.expect === 'verdict' ? 'verdict' : `output "${context.outputSchema?.name ?? ''}"`;

function repairPrompt(context: AgentMachineInput): string {
  const spec = responseSchemaOf(context);
  if (context.expect === 'verdict') {
    return (
      'Your reply was not a valid verdict. Reply with only a JSON object of the form ' +
      '{"decision": "approve" | "reject", "feedback": "<what must change, or a short note>"}.'
    );
  }
  return `Your reply did not match the required ${outputName(context)}. Reply with only a JSON value matching this JSON Schema:\n${JSON.stringify(spec?.schema)}`;
}

/** The first limit this step has reached, described; undefined while every limit has room. Time is the host's to check. */
function spentBudget(context: AgentContext): string | undefined {
  const budget = context.budget;
  if (!budget) return undefined;
  const tokens = context.usage.inputTokens + context.usage.outputTokens;
  const source = (key: string) => budget.sources[key] ?? `${key} budget`;
  if (budget.tokens !== undefined && tokens >= budget.tokens) {
    return `${source('tokens')} reached (${tokens} of ${budget.tokens} tokens left to this step used)`;
  }
  if (budget.costUsd !== undefined && context.costUsd >= budget.costUsd) {
    return `${source('costUsd')} reached ($${context.costUsd.toFixed(4)} of $${budget.costUsd.toFixed(4)} left to this step spent)`;
  }
  // Summaries are model calls too.
  const calls = context.turn + context.compactions;
  if (budget.modelCalls !== undefined && calls >= budget.modelCalls) {
    return `${source('modelCalls')} reached (${calls} of ${budget.modelCalls} model calls left to this step made)`;
  }
  return undefined;
}

/** Messages kept whole at the end of a conversation when older ones are summarized. */
const KEEP_RECENT = 6;

/** A rough count (4 characters a token) that is good enough to decide when to compact. */
export function estimateTokens(messages: readonly ChatMessage[]): number {
  const chars = messages.reduce(
    (n, m) =>
      n +
      m.content.length +
      (m.role === 'assistant'
        ? (m.toolCalls ?? []).reduce((k, c) => k + c.arguments.length + c.name.length, 0)
        : 0),
    0,
  );
  return Math.ceil(chars / 4);
}

/** Where the kept tail starts: at most KEEP_RECENT messages, never starting inside a tool exchange. */
function tailStart(messages: readonly ChatMessage[]): number {
  let start = Math.max(2, messages.length - KEEP_RECENT);
  while (start < messages.length && messages[start]?.role === 'tool') start++;
  return start;
}

/** The turns between the opening (instructions and task) and the recent tail: what a compaction summarizes. */
export function olderTurns(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.slice(2, tailStart(messages));
}

/** The conversation with its older turns replaced by their summary. */
export function compacted(messages: readonly ChatMessage[], summary: string): ChatMessage[] {
  return [
    ...messages.slice(0, 2),
    {
      role: 'user',
      content: `Summary of the work so far (earlier turns were condensed to save context):\n${summary}`,
    },
    ...messages.slice(tailStart(messages)),
  ];
}

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
  return {
    // The journal being out of reach is the step's circumstance, not its failure: the workflow sends it again.
    code: errorCode(error) === 'journal_unavailable' ? 'journal_unavailable' : 'tool_runner_failed',
    message: `agent ${context.agent}: the tool runner failed: ${errorMessage(error)}`,
  };
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

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
