import { randomBytes } from 'node:crypto';
import {
  ApprovalDecision,
  type DecisionReceipt,
  HumanAnswer,
  type HumanRequest,
  subjects,
} from '@troupe/protocol';
import type { z } from 'zod';
import type { ApprovalAsk, ApprovalDecisionOutcome } from '../agent/agentMachine.ts';
import type { KvStore } from '../durable/kvStore.ts';
import type { Clock } from '../events/clock.ts';
import type { EventFactory, EventScope } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import { ToolError } from '../tools/toolError.ts';
import type { NatsBus } from '../transport/natsBus.ts';

/** Who is asking: the task, the agent and its step. */
export interface HumanScope extends EventScope {
  agent: string;
  stepId: string;
  /** How long a person has here; the gate's default when absent. */
  timeoutMs?: number;
}

/** Where agents turn to a person: approvals for `ask` calls, and questions from `ask_human`. */
export interface HumanGate {
  /** Resolves with the person's decision on the call, or a deny when nobody decides in time. */
  approve(ask: ApprovalAsk, scope: HumanScope, signal: AbortSignal): Promise<ApprovalDecisionOutcome>;
  /** Resolves with the person's answer; fails with a `timeout` ToolError when none comes in time. */
  ask(question: string, scope: HumanScope, signal: AbortSignal): Promise<string>;
}

export interface NatsHumanGateOptions {
  bus: NatsBus;
  /** The KV bucket `approvals`, where `troupe approvals` finds what is pending. */
  store: KvStore<typeof HumanRequest>;
  events: EventFactory;
  clock: Clock;
  logger: Logger;
  /** How long a person has to decide or answer. */
  timeoutMs: number;
}

type Outcome<T> = { kind: 'decided'; value: T; by?: string } | { kind: 'expired' };

/**
 * Asks people over NATS. Each request gets an unguessable id, is recorded in KV as pending, announced as an
 * event, and waits on `troupe.approvals.<taskId>.<id>` for one valid reply. Only that subject resumes the
 * call: a reply for another id finds nobody waiting, and a second reply finds the subscription gone.
 */
export class NatsHumanGate implements HumanGate {
  readonly #o: NatsHumanGateOptions;

  constructor(options: NatsHumanGateOptions) {
    this.#o = options;
  }

  async approve(ask: ApprovalAsk, scope: HumanScope, signal: AbortSignal): Promise<ApprovalDecisionOutcome> {
    const id = newId('ap');
    const { events, bus } = this.#o;
    const ref = { agent: scope.agent, stepId: scope.stepId };
    const outcome = await this.#wait(
      id,
      { kind: 'approval', callId: ask.callId, tool: ask.tool, arguments: ask.arguments, prompt: ask.reason },
      scope,
      ApprovalDecision,
      (decision) => (decision.decision === 'allow' ? 'allow' : 'deny'),
      (expiresAt) =>
        bus.publishEvent(
          events.make(
            'approval.requested',
            scope,
            {
              ...ref,
              approvalId: id,
              callId: ask.callId,
              tool: ask.tool,
              arguments: ask.arguments,
              reason: ask.reason,
              expiresAt,
            },
            { from: scope.agent, to: 'human' },
          ),
        ),
      signal,
    );
    const decided: ApprovalDecisionOutcome =
      outcome.kind === 'decided'
        ? {
            decision: outcome.value.decision,
            ...(outcome.value.reason === undefined ? {} : { reason: outcome.value.reason }),
            ...(outcome.by === undefined ? {} : { by: outcome.by }),
          }
        : {
            decision: 'deny',
            reason: `no decision within ${seconds(this.#timeout(scope))} s; denied by default`,
            by: 'timeout',
          };
    bus.publishEvent(
      events.make(
        'approval.decided',
        scope,
        { ...ref, approvalId: id, ...decided, ...(outcome.kind === 'expired' ? { expired: true } : {}) },
        { from: 'human', to: scope.agent },
      ),
    );
    return decided;
  }

  async ask(question: string, scope: HumanScope, signal: AbortSignal): Promise<string> {
    const id = newId('q');
    const { events, bus } = this.#o;
    const ref = { agent: scope.agent, stepId: scope.stepId };
    const outcome = await this.#wait(
      id,
      { kind: 'question', prompt: question },
      scope,
      HumanAnswer,
      () => 'answered',
      () =>
        bus.publishEvent(
          events.make(
            'human.asked',
            scope,
            { ...ref, questionId: id, question },
            { from: scope.agent, to: 'human' },
          ),
        ),
      signal,
    );
    if (outcome.kind === 'expired') {
      throw new ToolError(
        'timeout',
        `nobody answered within ${seconds(this.#timeout(scope))} s (question ${id})`,
      );
    }
    bus.publishEvent(
      events.make(
        'human.answered',
        scope,
        { ...ref, questionId: id, answer: outcome.value.answer, ...(outcome.by ? { by: outcome.by } : {}) },
        { from: 'human', to: scope.agent },
      ),
    );
    return outcome.value.answer;
  }

  #timeout(scope: HumanScope): number {
    return scope.timeoutMs ?? this.#o.timeoutMs;
  }

  /** Records the request, listens for its one reply, announces it, and settles on the reply or the deadline. */
  async #wait<S extends z.ZodType<{ by?: string | undefined }>>(
    id: string,
    request: Pick<HumanRequest, 'kind' | 'prompt'> & Partial<HumanRequest>,
    scope: HumanScope,
    schema: S,
    outcomeOf: (value: z.infer<S>) => DecisionReceipt['outcome'],
    announce: (expiresAt: string) => void,
    signal: AbortSignal,
  ): Promise<Outcome<z.infer<S>>> {
    const { bus, store, clock } = this.#o;
    const timeoutMs = this.#timeout(scope);
    const now = clock.now();
    const record: HumanRequest = {
      ...request,
      id,
      taskId: scope.taskId,
      pipeline: scope.pipeline,
      agent: scope.agent,
      stepId: scope.stepId,
      status: 'pending',
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + timeoutMs).toISOString(),
    };
    await store.put(id, record);
    let settle: (outcome: Outcome<z.infer<S>>) => void = () => {};
    const settled = new Promise<Outcome<z.infer<S>>>((resolve) => (settle = resolve));
    const subscription = bus.subscribe(
      subjects.approval(scope.taskId, id),
      schema,
      (delivery) => {
        subscription.unsubscribe();
        delivery.respond({ ok: true, id, outcome: outcomeOf(delivery.value) } satisfies DecisionReceipt);
        settle({
          kind: 'decided',
          value: delivery.value,
          ...(delivery.value.by ? { by: delivery.value.by } : {}),
        });
      },
      {
        reporter: `agent:${scope.pipeline}/${scope.agent}`,
        meta: () => ({ taskId: scope.taskId, from: 'human', to: scope.agent, kind: record.kind }),
      },
    );
    await bus.flush();
    // The deadline or an abort closes the subject at once, so a late reply finds nobody waiting rather than
    // getting a receipt for a call that was already denied.
    const expire = () => {
      subscription.unsubscribe();
      settle({ kind: 'expired' });
    };
    const timer = setTimeout(expire, timeoutMs);
    const onAbort = expire;
    signal.addEventListener('abort', onAbort, { once: true });
    // Aborted while the request was being recorded: settle now, and announce nothing nobody will answer.
    if (signal.aborted) onAbort();
    else announce(record.expiresAt);
    try {
      const outcome = await settled;
      await this.#close(record, outcome, signal.aborted);
      if (signal.aborted) throw new ToolError('cancelled', `${record.kind} ${id} was cancelled`);
      return outcome;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      subscription.unsubscribe();
    }
  }

  async #close(
    record: HumanRequest,
    outcome: Outcome<{ by?: string | undefined }>,
    aborted: boolean,
  ): Promise<void> {
    const decided = outcome.kind === 'decided' ? (outcome.value as Record<string, unknown>) : undefined;
    const status: HumanRequest['status'] =
      outcome.kind === 'expired' || aborted
        ? 'expired'
        : record.kind === 'question'
          ? 'answered'
          : decided?.decision === 'allow'
            ? 'allowed'
            : 'denied';
    const reason = typeof decided?.reason === 'string' ? decided.reason : undefined;
    await this.#o.store
      .put(record.id, {
        ...record,
        status,
        decidedAt: new Date(this.#o.clock.now()).toISOString(),
        ...(outcome.kind === 'decided' && outcome.by ? { by: outcome.by } : {}),
        ...(reason === undefined ? {} : { reason }),
      })
      .catch((error: unknown) =>
        this.#o.logger.warn({ err: error, id: record.id }, 'cannot record the decision'),
      );
  }
}

const seconds = (ms: number): number => Math.round(ms / 1000);

/** Unguessable and subject-safe. */
const newId = (prefix: string): string => `${prefix}-${randomBytes(9).toString('base64url')}`;
