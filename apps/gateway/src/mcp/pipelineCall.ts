import {
  type CallToolResult,
  type InputRequiredResult,
  inputRequired,
  inputResponse,
  type RequestStateCodec,
  type ServerContext,
} from '@modelcontextprotocol/server';
import { followTaskEvents } from '@troupe/client';
import type { HumanRequest } from '@troupe/protocol';
import { McpRoundState } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { AnswerSchemas } from '../a2a/answerSchemas.ts';
import type { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { type ElicitationForm, elicitationForm } from './elicitationForm.ts';
import { holdsScope } from './holdsScope.ts';
import { elicitationFor, elsewhere, howToSettle, replyOf } from './humanAsk.ts';
import { ProgressReporter } from './progressReporter.ts';
import { toolResultOf } from './taskResult.ts';

/** What a pipeline tool's calls need from the server that serves them. */
export interface PipelineCallContext {
  bus: JetStreamBus;
  actions: GatewayActions;
  codec: RequestStateCodec<McpRoundState>;
  who: Principal;
  /** The revision the server instance serves: `legacy` for 2025-11-25 (and older), `modern` for 2026-07-28. */
  era: 'legacy' | 'modern';
  /** The gateway's per-token caps: following a task holds one of the token's NATS consumers. */
  quota?: StreamQuota;
  /** Aborted when the server itself is closing, not the client cancelling. */
  closing?: AbortSignal;
  /** Who the client says it is (its `clientInfo.name`): recorded as who decided, beside the principal. */
  clientName(ctx: ServerContext): string;
  /** Whether the client can show its user a form (declared the elicitation capability, form mode). */
  canElicit(ctx: ServerContext): boolean;
}

export interface PipelineCallArgs {
  goal: string;
  input?: Record<string, unknown>;
}

/**
 * One `tools/call` of a pipeline tool: submits the task (or, on a later round, takes the user's answer to what the
 * last round asked), then follows the task's events, as progress, to its end. An approval or question of the task
 * ends the round with `input_required` when the client can ask its user and the principal may decide (the next
 * round answers it and follows on from there); otherwise the call keeps waiting and says how to decide it elsewhere.
 * A call the client cancels cancels the task.
 */
export async function callPipeline(
  call: PipelineCallContext,
  pipeline: string,
  args: PipelineCallArgs,
  structured: boolean,
  ctx: ServerContext,
): Promise<CallToolResult | InputRequiredResult> {
  const round = roundOf(ctx, call.who, pipeline);
  // Following the task holds one of the token's NATS consumers: past its cap the call is refused (an error result
  // naming the cap) before it starts a task or records an answer, so a refused call leaves nothing behind.
  const release = call.quota?.take(call.who, 'consumers');
  try {
    return await run(call, pipeline, args, structured, ctx, round);
  } finally {
    release?.();
  }
}

async function run(
  call: PipelineCallContext,
  pipeline: string,
  args: PipelineCallArgs,
  structured: boolean,
  ctx: ServerContext,
  round: McpRoundState | undefined,
): Promise<CallToolResult | InputRequiredResult> {
  const progress = new ProgressReporter(ctx, round?.progress);
  let taskId: string;
  if (round) {
    taskId = round.taskId;
    await answer(call, round, ctx, progress);
  } else {
    const client = call.clientName(ctx);
    const { view } = await call.actions.submit(call.who, pipeline, {
      goal: args.goal,
      ...(args.input ? { input: args.input } : {}),
      metadata: { via: 'mcp', 'mcp.client': client.slice(0, 200) },
    });
    taskId = view.taskId;
    await progress.say(`task ${taskId} submitted to ${pipeline}`);
  }
  const asked = await follow(call, { taskId, pipeline }, round?.after, ctx, progress);
  if (ctx.mcpReq.signal.aborted) {
    await cancel(call, taskId, ctx);
    return {
      content: [{ type: 'text', text: `task ${taskId} cancelled: the call was cancelled` }],
      isError: true,
    };
  }
  if (asked) {
    // On 2025-11-25 the SDK asks the user while no round of ours runs: a cancel meanwhile reaches only this signal.
    if (call.era === 'legacy')
      ctx.mcpReq.signal.addEventListener('abort', () => void cancel(call, taskId, ctx), { once: true });
    const declared = await declaredForm(call, asked.request);
    const state: McpRoundState = {
      taskId,
      pipeline,
      who: call.who.name,
      after: asked.seq,
      asked: asked.request.id,
      progress: progress.count,
      ...(declared ? { declared: true } : {}),
    };
    return inputRequired({
      inputRequests: { [asked.request.id]: elicitationFor(asked.request, declared) },
      requestState: await call.codec.mint(state, ctx),
    });
  }
  return toolResultOf(await call.actions.task(call.who, taskId), structured);
}

/**
 * Cancels the task of a call the client cancelled; one that has ended already stays as it ended. A call ended by
 * the server closing (a gateway stopping) leaves its task running: it is durable, and `troupe_get` reads it.
 */
async function cancel(call: PipelineCallContext, taskId: string, ctx: ServerContext): Promise<void> {
  if (call.closing?.aborted) return;
  await call.actions
    .cancel(call.who, taskId, `the MCP client ${call.clientName(ctx)} cancelled its call`)
    .catch(() => undefined);
}

/** The round state the client echoed, when this is a later round; refused when it was minted for another call. */
function roundOf(ctx: ServerContext, who: Principal, pipeline: string): McpRoundState | undefined {
  const echoed = ctx.mcpReq.requestState<unknown>();
  if (echoed === undefined) return undefined;
  const state = McpRoundState.parse(echoed);
  if (state.who !== who.name || state.pipeline !== pipeline)
    throw new Error('this requestState belongs to another caller or tool: call the tool afresh');
  return state;
}

/** Records the user's response to what the last round asked; one the request no longer waits for is only told. */
async function answer(
  call: PipelineCallContext,
  round: McpRoundState,
  ctx: ServerContext,
  progress: ProgressReporter,
) {
  const request = await pending(call, round.taskId, round.asked);
  if (!request) return progress.say(`${round.asked} was settled meanwhile`);
  const reply = replyOf(
    request,
    inputResponse(ctx.mcpReq.inputResponses, round.asked),
    `${call.clientName(ctx)} (MCP)`,
    round.declared === true,
  );
  if (reply.kind === 'leave')
    return progress.say(`${request.id} stays open: ${reply.why}; settle it with ${howToSettle(request)}`);
  try {
    const decided = await call.actions.decide(call.who, request.id, reply.body);
    await progress.say(`${request.id}: ${decided.outcome}`);
  } catch (error) {
    // Decided by someone else between the rounds: theirs stands, and the task goes on.
    await progress.say(`${request.id} was not recorded: ${(error as Error).message}`);
  }
}

/**
 * Follows the task's events after `after` to its end, reporting progress. Stops early at an approval or question
 * still pending that this call should ask the user, or when the client cancels.
 */
async function follow(
  call: PipelineCallContext,
  task: { taskId: string; pipeline: string },
  after: number | undefined,
  ctx: ServerContext,
  progress: ProgressReporter,
): Promise<{ request: HumanRequest; seq: number } | undefined> {
  const stop = new AbortController();
  const cancelled = () => stop.abort();
  ctx.mcpReq.signal.addEventListener('abort', cancelled, { once: true });
  let asked: { request: HumanRequest; seq: number } | undefined;
  const mayAsk = call.canElicit(ctx) && holdsScope(call.who, 'approve');
  try {
    if (ctx.mcpReq.signal.aborted) return undefined;
    await followTaskEvents(call.bus, task, {
      ...(after === undefined ? {} : { after }),
      signal: stop.signal,
      onEvent: async ({ seq, event }) => {
        await progress.event(event);
        const id =
          event.kind === 'approval.requested'
            ? event.data.approvalId
            : event.kind === 'human.asked'
              ? event.data.questionId
              : undefined;
        if (id === undefined) return;
        // A request the history shows that someone has settled since is not asked again.
        const request = await pending(call, task.taskId, id);
        if (!request) return;
        if (!mayAsk) return progress.say(elsewhere(request));
        asked = { request, seq };
        stop.abort();
      },
    });
  } finally {
    ctx.mcpReq.signal.removeEventListener('abort', cancelled);
  }
  return asked;
}

/** The form a question's `human` step declares for its answer, when a form can show it. */
async function declaredForm(
  call: PipelineCallContext,
  request: HumanRequest,
): Promise<ElicitationForm | undefined> {
  if (request.kind !== 'question') return undefined;
  return elicitationForm(await new AnswerSchemas(call.bus).of(request.taskId, request.stepId));
}

async function pending(
  call: PipelineCallContext,
  taskId: string,
  id: string,
): Promise<HumanRequest | undefined> {
  const requests = await call.actions.approvals(call.who, { taskId });
  return requests.find((r) => r.id === id && r.status === 'pending');
}
