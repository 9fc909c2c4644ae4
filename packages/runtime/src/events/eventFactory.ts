import { createHash } from 'node:crypto';
import { type EventData, type EventKind, type EventOf, TroupeEvent } from '@troupe/protocol';
import type { z } from 'zod';
import { checkedOwnValue, strictOwnValues } from '../durable/ownValues.ts';
import { redactDeep } from '../logging/secrets.ts';
import { type Clock, systemClock } from './clock.ts';

/** What every event of one task shares. */
export interface EventScope {
  pipeline: string;
  taskId: string;
  traceparent: string;
}

/** Who handed what to whom, for events that cross agents. */
export interface EventRoute {
  from?: string;
  to?: string;
}

type Identity = { [K in EventKind]: (data: z.input<(typeof EventData)[K]>) => readonly unknown[] };

/**
 * What makes an event one fact of its task, besides its task and kind. An event's id is built from these, so the
 * same fact published again — by a step run again after a crash, a resent final event, a second coordinator
 * resuming a task — carries the same id, and the `EVENTS` stream stores it once (`Nats-Msg-Id`).
 */
const IDENTITY: Identity = {
  'task.accepted': () => [],
  // A resume after a pause is its own fact: the task may be paused and resumed several times in one delivery.
  'task.resumed': (d) =>
    d.after === 'pause' ? [d.deliveries, 'pause', d.pausedMs, d.since] : [d.deliveries],
  // When the pause began, not where: a restored task publishes its pause again from where it is held now.
  'task.paused': (d) =>
    d.since === undefined ? [d.state, d.round, d.by, d.reason] : [d.since, d.by, d.reason],
  'task.told': (d) => [d.messageId],
  'agent.told': (d) => [d.stepId, d.turn],
  'step.started': (d) => [d.stepId],
  // A foreach step's items run the same steps: the item tells them apart.
  'step.skipped': (d) => [d.step, d.round, d.item],
  // A router agent asked again after a crash may pick another target: each pick is a fact of its own.
  'route.chosen': (d) => [d.step, d.round, d.item, d.target],
  'branches.joined': (d) => [d.step, d.round, d.item],
  'items.joined': (d) => [d.step, d.round],
  'agent.handoff': (d) => [d.step, d.round, d.item],
  'llm.request': (d) => [d.stepId, d.turn],
  // A reply asked for again (it could not be journaled before a crash) may differ: each reply is a fact of its own.
  'llm.response': (d) => [d.stepId, d.turn, digest(JSON.stringify([d.content, d.toolCalls]))],
  'llm.error': (d) => [d.stepId, d.turn],
  'llm.delta': (d) => [d.stepId, d.turn, d.seq],
  'llm.retry': (d) => [d.stepId, d.turn, `${d.provider}:${d.model}`, d.attempt],
  'llm.fallback': (d) => [d.stepId, d.turn, d.from],
  'context.compacted': (d) => [d.stepId, digest(d.summary)],
  'session.compacted': (d) => [d.session, d.turns],
  // By position, as the journal keys calls: models may repeat call ids, or send none.
  'tool.call': (d) => [d.stepId, d.turn, d.index ?? d.callId],
  'tool.progress': (d) => [d.stepId, d.turn, d.index ?? d.callId, d.seq],
  'tool.result': (d) => [d.stepId, d.turn, d.index ?? d.callId],
  'approval.requested': (d) => [d.approvalId],
  'approval.decided': (d) => [d.approvalId],
  'human.asked': (d) => [d.questionId],
  'human.answered': (d) => [d.questionId],
  // A step's outcome: the same one published again is one fact; a step whose final reply was asked again after a
  // crash (a local step's is in no journal) may end otherwise, and its end is stored beside the first.
  'step.completed': (d) => [
    d.stepId,
    digest(JSON.stringify([d.ok, d.output, d.outputRef?.sha256, d.verdict?.decision, d.error?.code])),
  ],
  'task.completed': () => [],
  'task.failed': () => [],
  'task.cancelled': () => [],
  // One score per task: a redelivery of its ended task scores it again, and the stream keeps the first.
  'eval.scored': () => [],
};

/** The id of an event: its task, its kind and what makes it that fact (see {@link IDENTITY}). */
export function eventId<K extends EventKind>(
  taskId: string,
  kind: K,
  data: z.input<(typeof EventData)[K]>,
): string {
  const parts = IDENTITY[kind](data).filter((part) => part !== undefined);
  return [taskId, kind, ...parts].join(':');
}

/** How an {@link EventFactory} checks the events it makes. */
export interface EventFactoryOptions {
  /**
   * Parse each event with `TroupeEvent` (refusing a malformed one, dropping undeclared fields): for data from outside
   * this process's own code, as `troupe replay`'s recorded replies. Off by default: events built by Troupe's code are
   * typed by the schemas, and every reader of the stream parses what it reads.
   */
  validate?: boolean;
  /**
   * Also refuse an event the parse would change (an undeclared field, a default, a transformed value). On in tests
   * (`TROUPE_STRICT=1`, see {@link strictOwnValues}), so a builder that drifts from its schema fails there.
   */
  strict?: boolean;
}

/**
 * Builds wire events with deterministic ids (see {@link eventId}) and timestamps from an injected clock. The data is
 * typed by the event's schema, so the compiler checks its shape; its values are not parsed again unless the factory
 * is told to (see {@link EventFactoryOptions}): a zod parse of the 30-kind union cost more CPU per task than anything
 * else of ours on the bench (docs/performance.md).
 */
export class EventFactory {
  readonly #clock: Pick<Clock, 'now'>;
  readonly #validate: boolean;
  readonly #strict: boolean;

  constructor(clock: Pick<Clock, 'now'> = systemClock, options: EventFactoryOptions = {}) {
    this.#clock = clock;
    this.#strict = options.strict ?? strictOwnValues();
    this.#validate = this.#strict || options.validate === true;
  }

  make<K extends EventKind>(
    kind: K,
    scope: EventScope,
    data: z.input<(typeof EventData)[K]>,
    route: EventRoute = {},
  ): EventOf<K> {
    const event = {
      id: eventId(scope.taskId, kind, data),
      ts: new Date(this.#clock.now()).toISOString(),
      pipeline: scope.pipeline,
      taskId: scope.taskId,
      kind,
      ...(route.from === undefined ? {} : { from: route.from }),
      ...(route.to === undefined ? {} : { to: route.to }),
      traceparent: scope.traceparent,
      // A secret a model or a tool let slip (an error quoting a key, a file read) is not published.
      data: redactDeep(data),
    } as unknown as EventOf<K>;
    return this.#validate ? this.#checked(event) : event;
  }

  #checked<K extends EventKind>(event: EventOf<K>): EventOf<K> {
    const what = `event ${event.kind} of task ${event.taskId}`;
    return checkedOwnValue(TroupeEvent, event, what, this.#strict) as EventOf<K>;
  }
}

/** Shortens text for events and logs, saying how much was left out. */
export function preview(text: string, max = 4_000): string {
  return text.length <= max ? text : `${text.slice(0, max)}…[${text.length - max} more characters]`;
}

function digest(text: string): string {
  return createHash('sha256').update(text).digest('base64url').slice(0, 16);
}
