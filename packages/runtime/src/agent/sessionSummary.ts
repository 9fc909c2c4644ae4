import type { ChatMessage, ModelResponse } from '@troupe/llm';
import {
  type ConversationSummary,
  errorMessage,
  type SessionSummaryReply,
  SessionSummaryRequest,
  type SessionTurn,
  subjects,
} from '@troupe/protocol';
import { type Clock, newTraceparent, timeoutSignal } from '../events/clock.ts';
import type { EventFactory } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import type { AgentDefinition } from './agentDefinition.ts';

/** How long the model has to write a session's summary; the gateway waits a little longer for the reply. */
export const SESSION_SUMMARY_TIMEOUT_MS = 90_000;

const SESSION_SUMMARY_INSTRUCTIONS =
  'You keep the running summary of a working session: a person gives goals one after another, and each goal ran ' +
  'as a task whose result is shown. Fold the turns below into the summary so far, for the agent that takes the ' +
  'next goal: what was asked, what was delivered (names, paths, numbers and decisions exactly), what failed and ' +
  'why, and what is still open. Later turns override earlier ones where they conflict. Be factual and concise. ' +
  'Reply with the new summary only.';

/** What the summarizer's model is asked: the instructions, then the summary so far and the turns to fold in. */
export function sessionSummaryMessages(request: SessionSummaryRequest): ChatMessage[] {
  const parts: string[] = [];
  if (request.previous !== undefined) {
    parts.push(`# Summary so far (turns 1–${request.covered})\n${request.previous}`);
  }
  for (const [i, turn] of request.turns.entries()) parts.push(turnText(turn, request.covered + i + 1));
  return [
    { role: 'system', content: SESSION_SUMMARY_INSTRUCTIONS },
    { role: 'user', content: parts.join('\n\n') },
  ];
}

const turnText = (turn: SessionTurn, n: number) =>
  `# Turn ${n} (task ${turn.taskId}, ${turn.status})\nGoal: ${turn.goal}\nResult: ${turn.result || '(none)'}`;

export interface SessionSummaryDeps {
  bus: Bus;
  pipeline: string;
  clock: Clock;
  events: EventFactory;
  logger: Logger;
  price?: (provider: string, model: string, response: ModelResponse) => number;
  /** Whether the host is stopping: a request that comes then is refused, and the gateway falls back. */
  stopping: () => boolean;
}

/**
 * Serves `troupe.agents.<pipeline>.<agent>.summarize` for one agent, in a queue group: the agent's model folds a
 * session's older turns into its running summary, and a `session.compacted` event for the follow-up task reports
 * the call (so metrics and the event log count it like any model call).
 */
export function serveSessionSummaries(agent: AgentDefinition, deps: SessionSummaryDeps): BusSubscription {
  const { pipeline } = deps;
  return deps.bus.subscribe(
    subjects.sessionSummary(pipeline, agent.name),
    SessionSummaryRequest,
    async (delivery) => delivery.respond(await summarizeSession(agent, delivery.value, deps)),
    {
      queue: `troupe-${pipeline}-${agent.name}-summarize`,
      reporter: `agent:${pipeline}/${agent.name}`,
      meta: (request) => ({ taskId: request.taskId, to: agent.name, kind: 'session.summarize' }),
    },
  );
}

type WrittenSummary = ConversationSummary & { provider: string; model: string };

async function summarizeSession(
  agent: AgentDefinition,
  request: SessionSummaryRequest,
  deps: SessionSummaryDeps,
): Promise<SessionSummaryReply> {
  const { pipeline, clock } = deps;
  if (deps.stopping()) return refusal('worker_stopped', `the worker serving ${agent.name} is stopping`);
  if (request.pipeline !== pipeline || request.agent !== agent.name) {
    return refusal('misrouted', `a summary for ${request.pipeline}/${request.agent} reached ${agent.name}`);
  }
  const started = clock.now();
  const deadline = timeoutSignal(clock, SESSION_SUMMARY_TIMEOUT_MS);
  try {
    const response = await agent.model.complete({
      messages: sessionSummaryMessages(request),
      tools: [],
      context: {
        taskId: request.taskId,
        pipeline,
        agent: agent.name,
        stepId: `${request.taskId}.session-summary`,
        purpose: 'summary',
      },
      signal: deadline.signal,
    });
    if (response.content.trim() === '') {
      return refusal('invalid_response', `${agent.name}'s model returned an empty session summary`);
    }
    const provider = response.provider ?? agent.model.provider;
    const summary: WrittenSummary = {
      summary: response.content,
      usage: response.usage,
      costUsd: deps.price?.(provider, response.model, response) ?? 0,
      provider,
      model: response.model,
      durationMs: Math.max(0, clock.now() - started),
    };
    report(request, summary, deps);
    return { ok: true, summary };
  } catch (error) {
    deps.logger.warn(
      { err: error, session: request.session, taskId: request.taskId },
      `${agent.name} could not summarize session ${request.session}`,
    );
    const code = (error as { code?: unknown } | undefined)?.code;
    return refusal(typeof code === 'string' ? code : 'model_failed', errorMessage(error));
  } finally {
    deadline.cancel();
  }
}

/** Publishes the `session.compacted` event of the follow-up task the summary was made for. */
function report(request: SessionSummaryRequest, summary: WrittenSummary, deps: SessionSummaryDeps): void {
  const event = deps.events.make(
    'session.compacted',
    { pipeline: deps.pipeline, taskId: request.taskId, traceparent: newTraceparent() },
    {
      session: request.session,
      agent: request.agent,
      turns: request.covered + request.turns.length,
      folded: request.turns.length,
      summary: summary.summary,
      provider: summary.provider,
      model: summary.model,
      usage: summary.usage,
      costUsd: summary.costUsd,
      durationMs: summary.durationMs ?? 0,
    },
    { from: request.agent },
  );
  void deps.bus.publishEvent(event);
}

const refusal = (code: string, message: string): SessionSummaryReply => ({
  ok: false,
  error: { code, message },
});
