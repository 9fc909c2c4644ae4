import { randomBytes } from 'node:crypto';
import {
  ApprovalDecision,
  type DecisionReceipt,
  errorMessage,
  HumanAnswer,
  type HumanRequest,
  subjects,
} from '@troupe/protocol';
import { createActor, toPromise } from 'xstate';
import type { z } from 'zod';
import { type KeyValue, underPrefix } from '../durable/kvStore.ts';
import type { Clock } from '../events/clock.ts';
import type { EventFactory, EventScope } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import { ToolError } from '../tools/toolError.ts';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import type { ApprovalAsk } from './approvalAsk.ts';
import {
  decidedFrom,
  type HumanOutcome,
  type HumanReply,
  type HumanRequestEvent,
  humanRequestMachine,
} from './humanRequest.ts';
import { RecordWatch } from './recordWatch.ts';
import { closedByEnding, describeEnding, TaskEndedError } from './taskEnded.ts';

/** Who is asking: the task, the agent and its step. */
export interface HumanScope extends EventScope {
  agent: string;
  stepId: string;
  /** How long a person has here; the gate's default when absent. */
  timeoutMs?: number;
}

/**
 * How a request carries over a restart: `id` re-attaches to a request asked before (by a run of the step that
 * died), `onAsked` is told the id of a new request before anyone is asked, so it can be journaled.
 */
export interface HumanRequestOptions {
  id?: string;
  onAsked?: (id: string) => Promise<void>;
}

/** Where agents turn to a person: approvals for `ask` calls, and questions from `ask_human`. */
export interface HumanGate {
  /** Resolves with the person's decision on the call, or a deny when nobody decides in time. */
  approve(
    ask: ApprovalAsk,
    scope: HumanScope,
    signal: AbortSignal,
    options?: HumanRequestOptions,
  ): Promise<ApprovalDecision>;
  /** Resolves with the person's answer; fails with a `timeout` ToolError when none comes in time. */
  ask(
    question: string,
    scope: HumanScope,
    signal: AbortSignal,
    options?: HumanRequestOptions,
  ): Promise<string>;
  /**
   * The step is about to be stopped here to run again elsewhere: its requests cut short stay pending in KV
   * (instead of being marked expired), for the run that gets the step next.
   */
  leavePending?(stepId: string): void;
  /** What the step waits for a person on right now, if anything: for its heartbeats and `troupe status`. */
  waitingOn?(stepId: string): WaitingOn | undefined;
  /** Calls `listener` with the step's id whenever a step starts or stops waiting on a person; returns how to stop. */
  onWaitingChange?(listener: (stepId: string) => void): () => void;
  /**
   * The task is paused: its requests (those waiting here, and those asked or taken up here until {@link letGo}) stop
   * running out and stay answerable, their `held` recorded in KV. `since`: when the pause began, if known.
   */
  hold?(taskId: string, since?: number): void;
  /**
   * The task was resumed: each of its requests held here has the time it had left when held, from now. `since`: when
   * the pause it ends began, if known; a resume of an earlier pause, heard late, lets go of nothing.
   */
  letGo?(taskId: string, since?: number): void;
  /**
   * A step of the task was sent at `sentAt` (its workflow's clock): since a held task's workflow sends no step, a hold
   * that began before it has ended, though its resume was not heard here (the host's connection was down), and the
   * task's requests held here are let go as by {@link letGo}.
   */
  sentAfter?(taskId: string, sentAt: number): void;
}

/** A request a step is waiting on. */
export interface WaitingOn {
  kind: 'approval' | 'question';
  id: string;
}

export interface NatsHumanGateOptions {
  bus: Bus;
  /** The KV bucket `approvals`, where `troupe approvals` finds what is pending: `<pipeline>.<id>`. */
  store: KeyValue<HumanRequest>;
  events: EventFactory;
  clock: Clock;
  logger: Logger;
  /** How long a person has to decide or answer. */
  timeoutMs: number;
}

/**
 * Asks people over NATS. Each request gets an unguessable id, is recorded in KV as pending, announced as an
 * event, and waits on `troupe.approvals.<pipeline>.<taskId>.<id>` for one valid reply. Only that subject resumes the
 * call: a reply for another id finds nobody waiting, and a second reply finds the subscription gone.
 *
 * Requests outlive the process that asked: a decision recorded in KV while nobody waited (`troupe approve`
 * does that when no process answers) is taken when a resumed step re-attaches to the request, or at once
 * when it is recorded while the request waits: the gate reads its waiting requests' records on one timer
 * (`recordWatch.ts`), not a KV watch each. A gate that is {@link detach}ed (its host is shutting down)
 * leaves its requests pending for the next process.
 */
export class NatsHumanGate implements HumanGate {
  readonly #o: NatsHumanGateOptions;
  #detached = false;
  /** Steps whose requests stay pending when cut short (see {@link leavePending}). */
  readonly #leftPending = new Set<string>();
  /** The requests each step waits on now. */
  readonly #waiting = new Map<string, WaitingOn[]>();
  readonly #waitingListeners = new Set<(stepId: string) => void>();
  /** Tasks paused now, as told by {@link hold}; the oldest is forgotten past {@link MAX_HELD_TASKS}. */
  readonly #heldTasks = new Map<string, number>();
  /** The requests waiting here, by task: a hold or a let-go reaches them. */
  readonly #asking = new Map<string, Set<{ send(event: HumanRequestEvent): void }>>();
  /** Where every request waiting here has its record read again: one timer. */
  readonly #records: RecordWatch;
  /** Whether the gate hears its bus close, which ends every read of the records (heard from the first request on). */
  #hearsClose = false;

  constructor(options: NatsHumanGateOptions) {
    this.#o = options;
    this.#records = new RecordWatch(options.logger);
  }

  /** The record watch, told when the bus closes: nothing is read once the connection has. */
  #recordWatch(): RecordWatch {
    if (!this.#hearsClose) {
      this.#hearsClose = true;
      this.#o.bus.onStatus(({ type }) => {
        if (type === 'close') this.#records.close();
      });
    }
    return this.#records;
  }

  /** From now on, a request cut short stays pending in KV instead of being marked expired. */
  detach(): void {
    this.#detached = true;
  }

  /** Approvals and questions this gate is waiting on now, over every step. */
  get pending(): number {
    let count = 0;
    for (const waits of this.#waiting.values()) count += waits.length;
    return count;
  }

  waitingOn(stepId: string): WaitingOn | undefined {
    return this.#waiting.get(stepId)?.[0];
  }

  onWaitingChange(listener: (stepId: string) => void): () => void {
    this.#waitingListeners.add(listener);
    return () => this.#waitingListeners.delete(listener);
  }

  #waitingChanged(stepId: string): void {
    for (const listener of this.#waitingListeners) {
      try {
        listener(stepId);
      } catch (error) {
        this.#o.logger.warn({ err: error, stepId }, 'a waiting listener threw');
      }
    }
  }

  hold(taskId: string, since = Number.NEGATIVE_INFINITY): void {
    const before = this.#heldTasks.get(taskId);
    this.#heldTasks.delete(taskId);
    this.#heldTasks.set(taskId, Math.max(since, before ?? since));
    // A task cancelled while paused is never let go: the oldest hold goes first (a resume of it is then still sent).
    if (this.#heldTasks.size > MAX_HELD_TASKS) {
      const oldest = this.#heldTasks.keys().next().value;
      if (oldest !== undefined) this.#heldTasks.delete(oldest);
    }
    for (const asking of this.#asking.get(taskId) ?? []) asking.send({ type: 'hold' });
  }

  letGo(taskId: string, since?: number): void {
    const heldSince = this.#heldTasks.get(taskId);
    if (since !== undefined && heldSince !== undefined && heldSince > since) return;
    this.#heldTasks.delete(taskId);
    for (const asking of this.#asking.get(taskId) ?? []) asking.send({ type: 'letGo' });
  }

  sentAfter(taskId: string, sentAt: number): void {
    const heldSince = this.#heldTasks.get(taskId);
    if (heldSince !== undefined && heldSince < sentAt) this.letGo(taskId, heldSince);
  }

  leavePending(stepId: string): void {
    this.#leftPending.add(stepId);
    // Only the requests being cut short now need it; forget it once they have closed.
    setTimeout(() => this.#leftPending.delete(stepId), 60_000).unref();
  }

  async approve(
    ask: ApprovalAsk,
    scope: HumanScope,
    signal: AbortSignal,
    options: HumanRequestOptions = {},
  ): Promise<ApprovalDecision> {
    const { events, bus } = this.#o;
    const ref = { agent: scope.agent, stepId: scope.stepId };
    const { id, outcome } = await this.#wait(
      options,
      'ap',
      { kind: 'approval', callId: ask.callId, tool: ask.tool, arguments: ask.arguments, prompt: ask.reason },
      scope,
      ApprovalDecision,
      (decision) => (decision.decision === 'allow' ? 'allow' : 'deny'),
      (record) =>
        record.status === 'allowed' || record.status === 'denied'
          ? {
              decision: record.status === 'allowed' ? ('allow' as const) : ('deny' as const),
              ...(record.reason === undefined ? {} : { reason: record.reason }),
              ...(record.by === undefined ? {} : { by: record.by }),
            }
          : undefined,
      (approvalId, expiresAt) =>
        bus.publishEvent(
          events.make(
            'approval.requested',
            scope,
            {
              ...ref,
              approvalId,
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
    const decided: ApprovalDecision =
      outcome.kind === 'decided'
        ? {
            decision: outcome.value.decision,
            ...(outcome.value.reason === undefined ? {} : { reason: outcome.value.reason }),
            ...(outcome.by === undefined ? {} : { by: outcome.by }),
          }
        : outcome.kind === 'closed'
          ? { decision: 'deny', reason: `closed before anyone decided: ${outcome.why}`, by: 'troupe' }
          : {
              decision: 'deny',
              reason: `no decision within ${seconds(this.#timeout(scope))} s; denied by default`,
              by: 'timeout',
            };
    bus.publishEvent(
      events.make(
        'approval.decided',
        scope,
        { ...ref, approvalId: id, ...decided, ...(outcome.kind === 'decided' ? {} : { expired: true }) },
        { from: 'human', to: scope.agent },
      ),
    );
    if (outcome.kind === 'closed') throw new ToolError('cancelled', `approval ${id} was ${decided.reason}`);
    return decided;
  }

  async ask(
    question: string,
    scope: HumanScope,
    signal: AbortSignal,
    options: HumanRequestOptions = {},
  ): Promise<string> {
    const { events, bus } = this.#o;
    const ref = { agent: scope.agent, stepId: scope.stepId };
    const { id, outcome } = await this.#wait(
      options,
      'q',
      { kind: 'question', prompt: question },
      scope,
      HumanAnswer,
      () => 'answered',
      (record) =>
        record.status === 'answered' && record.answer !== undefined
          ? { answer: record.answer, ...(record.by === undefined ? {} : { by: record.by }) }
          : undefined,
      (questionId) =>
        bus.publishEvent(
          events.make(
            'human.asked',
            scope,
            { ...ref, questionId, question },
            { from: scope.agent, to: 'human' },
          ),
        ),
      signal,
    );
    if (outcome.kind === 'closed') {
      throw new ToolError('cancelled', `question ${id} was closed before anyone answered: ${outcome.why}`);
    }
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

  /**
   * Records the request (or finds the one asked before), listens for its one reply, announces it, and settles
   * on the reply, a decision recorded in KV, or the deadline.
   */
  async #wait<S extends z.ZodType<{ by?: string | undefined }>>(
    options: HumanRequestOptions,
    prefix: string,
    request: Pick<HumanRequest, 'kind' | 'prompt'> & Partial<HumanRequest>,
    scope: HumanScope,
    schema: S,
    outcomeOf: (value: z.infer<S>) => DecisionReceipt['outcome'],
    storedValue: (record: HumanRequest) => z.infer<S> | undefined,
    announce: (id: string, expiresAt: string) => void,
    signal: AbortSignal,
  ): Promise<{ id: string; outcome: HumanOutcome<z.infer<S>> }> {
    const { clock } = this.#o;
    const store = underPrefix(this.#o.store, scope.pipeline);
    const earlierEntry = options.id === undefined ? undefined : await store.get(options.id);
    const earlier = earlierEntry?.value;
    let record: HumanRequest;
    /** The revision of the pending record: a decision replaces only that, so one decision wins. */
    let pendingRevision: number;
    if (earlierEntry && earlier) {
      record = earlier;
      const stored = storedValue(record);
      if (stored !== undefined) return { id: record.id, outcome: decidedFrom(stored, true) };
      if (record.status === 'closed' && record.taskEnded) {
        return {
          id: record.id,
          outcome: { kind: 'closed', why: `the task ended: ${describeEnding(record.taskEnded)}` },
        };
      }
      if (record.status !== 'pending') return { id: record.id, outcome: { kind: 'expired' } };
      pendingRevision = earlierEntry.revision;
    } else {
      const id = newId(prefix);
      const now = clock.now();
      record = {
        ...request,
        id,
        taskId: scope.taskId,
        pipeline: scope.pipeline,
        agent: scope.agent,
        stepId: scope.stepId,
        status: 'pending',
        requestedAt: new Date(now).toISOString(),
        expiresAt: new Date(now + this.#timeout(scope)).toISOString(),
      };
      await options.onAsked?.(id);
      pendingRevision = await store.put(id, record);
    }
    const id = record.id;
    // Its subject, open while it waits for a reply: the gate's subscription, not a child actor of the request's (a
    // request waiting on a person for hours, its task asleep, keeps no actor but its own).
    let subscription: BusSubscription | undefined;
    const listen = (open: boolean) => {
      if (!open) {
        subscription?.unsubscribe();
        subscription = undefined;
      } else subscription ??= this.#listen(record, schema, asking);
    };
    const asking = createActor(humanRequestMachine, {
      clock,
      input: {
        record,
        pendingRevision,
        outcomeOf: outcomeOf as (value: HumanReply) => DecisionReceipt['outcome'],
        storedValue,
        closedRecord,
        listen,
        store,
        clock,
        logger: this.#o.logger,
        // Taken up held by a run whose task was resumed meanwhile (the run that held it died): let go from now.
        holdAsked: this.#heldTasks.has(scope.taskId),
      },
    });
    const ofTask = this.#asking.get(scope.taskId) ?? new Set();
    this.#asking.set(scope.taskId, ofTask.add(asking));
    const stop = () => asking.send({ type: 'stop', why: whyStopped(signal.reason) });
    const waiting: WaitingOn = { kind: record.kind, id };
    this.#waiting.set(scope.stepId, [...(this.#waiting.get(scope.stepId) ?? []), waiting]);
    this.#waitingChanged(scope.stepId);
    let unwatch = () => {};
    try {
      // Listening on the request's subject from here; the deadline or an abort closes it at once, so a late reply
      // finds nobody waiting rather than getting a receipt for a call that was already denied. No flush (a round trip
      // to the server) before the announcement: the subscription and the announcement leave on the same connection,
      // in that order, and the server takes a connection's messages in order, so whoever learns of the request from
      // its announcement replies to a subject already listened on. (In a cluster the interest reaches the other
      // servers later, flush or not; the record watch brings a decision that found nobody.)
      asking.start();
      // Its record read on the gate's one timer (no actor, timer or poll of its own): a decision written there settles it.
      unwatch = this.#recordWatch().watch(store, id, (value) => {
        const stored = storedValue(value);
        if (stored !== undefined && asking.getSnapshot().status === 'active')
          asking.send({ type: 'storedDecision', value: stored });
      });
      signal.addEventListener('abort', stop, { once: true });
      // Aborted while the request was being recorded: settle now, and announce nothing nobody will answer. One taken
      // up still pending is announced again, under the same event id: the run that recorded it may have died before
      // its announcement went out, and then nobody watching the events would ever hear of it.
      if (signal.aborted) stop();
      else announce(id, record.expiresAt);
      const outcome = (await toPromise(asking)) as HumanOutcome<z.infer<S>>;
      // Held or let go meanwhile, the record and its revision are the machine's now.
      const last = asking.getSnapshot().context;
      record = last.record;
      pendingRevision = last.pendingRevision;
      const leftForNextRun = signal.aborted && (this.#detached || this.#leftPending.has(record.stepId));
      if (leftForNextRun) {
        throw new ToolError('cancelled', `${record.kind} ${id} is left pending for the next run of the step`);
      }
      await this.#close(record, pendingRevision, outcome, signal.reason);
      if (signal.aborted && outcome.kind !== 'closed') {
        throw new ToolError('cancelled', `${record.kind} ${id} was cancelled`);
      }
      return { id, outcome };
    } finally {
      unwatch();
      subscription?.unsubscribe();
      asking.stop();
      ofTask.delete(asking);
      if (ofTask.size === 0 && this.#asking.get(scope.taskId) === ofTask) this.#asking.delete(scope.taskId);
      signal.removeEventListener('abort', stop);
      const left = (this.#waiting.get(scope.stepId) ?? []).filter((w) => w !== waiting);
      if (left.length > 0) this.#waiting.set(scope.stepId, left);
      else this.#waiting.delete(scope.stepId);
      this.#waitingChanged(scope.stepId);
    }
  }

  /**
   * Hears the request's subject for `asking`: each valid reply is told to it as `reply`, while it is active; an invalid
   * one is answered (or reported) by the bus. A subject that cannot be listened on (the connection is closing: the
   * host is stopping, and nobody can answer here) stops the request.
   */
  #listen(
    record: HumanRequest,
    schema: z.ZodType,
    asking: { send(event: HumanRequestEvent): void; getSnapshot(): { status: string } },
  ): BusSubscription | undefined {
    try {
      return this.#o.bus.subscribe(
        subjects.approval(record.pipeline, record.taskId, record.id),
        schema as z.ZodType<HumanReply>,
        (delivery) => {
          if (asking.getSnapshot().status === 'active') asking.send({ type: 'reply', delivery });
        },
        {
          reporter: `agent:${record.pipeline}/${record.agent}`,
          meta: () => ({ taskId: record.taskId, from: 'human', to: record.agent, kind: record.kind }),
        },
      );
    } catch (error) {
      asking.send({ type: 'stop', why: `cannot listen for a reply: ${errorMessage(error)}` });
      return undefined;
    }
  }

  /**
   * Records how a request ended, unless its decision is already stored: closed with its task's ending when the
   * step stopped because the task ended, else decided, answered or expired.
   */
  async #close(
    record: HumanRequest,
    pendingRevision: number,
    outcome: HumanOutcome<{ by?: string | undefined }>,
    abortReason: unknown,
  ): Promise<void> {
    if (outcome.kind === 'decided' && outcome.stored) return;
    const now = this.#o.clock.now();
    const endedOf = (base: HumanRequest): HumanRequest =>
      outcome.kind === 'closed' && abortReason instanceof TaskEndedError
        ? closedByEnding(base, abortReason.ending, now)
        : closedRecord(base, outcome, now);
    // Only a still-pending record is changed: a decision that reached KV first is not overwritten. One held or let go
    // since this run last wrote it (by the coordinator, which holds a task's requests at its pause) is still pending:
    // written over as it is now, so the record says what the step took.
    const store = underPrefix(this.#o.store, record.pipeline);
    let pending = { record, revision: pendingRevision };
    for (let attempt = 1; ; attempt++) {
      const written = await store
        .update(record.id, endedOf(pending.record), pending.revision)
        .catch((error: unknown) => {
          this.#o.logger.warn({ err: error, id: record.id }, 'cannot record how the request ended');
          return 0;
        });
      if (written !== undefined || attempt >= CLOSE_ATTEMPTS) return;
      const current = await store.get(record.id).catch(() => undefined);
      if (current?.value.status !== 'pending') return;
      pending = { record: current.value, revision: current.revision };
    }
  }
}

/** What stopped a step, from its abort reason, for the record and the event. */
function whyStopped(reason: unknown): string {
  if (reason instanceof TaskEndedError) return reason.message;
  if (!(reason instanceof Error)) return 'the step was stopped';
  if (reason.name === 'TimeoutError') return 'the step ran out of time';
  if (reason.name === 'BudgetExceeded') return reason.message;
  return 'the step was stopped';
}

/** The record of a request once it ended: decided, answered, or expired (also when its step stopped). */
function closedRecord(
  record: HumanRequest,
  outcome: HumanOutcome<{ by?: string | undefined }>,
  now: number,
): HumanRequest {
  const decided = outcome.kind === 'decided' ? (outcome.value as Record<string, unknown>) : undefined;
  const status: HumanRequest['status'] =
    outcome.kind !== 'decided'
      ? 'expired'
      : record.kind === 'question'
        ? 'answered'
        : decided?.decision === 'allow'
          ? 'allowed'
          : 'denied';
  const reason = typeof decided?.reason === 'string' ? decided.reason : undefined;
  // Ended, nothing is left to run out or to hold: a record keeping `held` would say its task is paused for ever.
  const { held: _held, ...unheld } = record;
  return {
    ...unheld,
    status,
    decidedAt: new Date(now).toISOString(),
    ...(outcome.kind === 'decided' && outcome.by ? { by: outcome.by } : {}),
    ...(reason === undefined ? {} : { reason }),
    ...(typeof decided?.answer === 'string' ? { answer: decided.answer } : {}),
  };
}

/** How many times a request's end is written again over a record held or let go meanwhile, still pending. */
const CLOSE_ATTEMPTS = 3;

/** How many paused tasks a gate remembers as held. */
const MAX_HELD_TASKS = 10_000;

const seconds = (ms: number): number => Math.round(ms / 1000);

/** Unguessable and subject-safe. */
const newId = (prefix: string): string => `${prefix}-${randomBytes(9).toString('base64url')}`;
