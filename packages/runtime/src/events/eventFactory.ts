import { type EventData, type EventKind, type EventOf, TroupeEvent } from '@troupe/protocol';
import type { z } from 'zod';
import { type Clock, type IdGenerator, randomId, systemClock } from './clock.ts';

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

/** Builds validated wire events with ids and timestamps from an injected clock and id generator. */
export class EventFactory {
  readonly #clock: Clock;
  readonly #ids: IdGenerator;

  constructor(clock: Clock = systemClock, ids: IdGenerator = randomId) {
    this.#clock = clock;
    this.#ids = ids;
  }

  make<K extends EventKind>(
    kind: K,
    scope: EventScope,
    data: z.input<(typeof EventData)[K]>,
    route: EventRoute = {},
  ): EventOf<K> {
    const candidate = {
      id: this.#ids(),
      ts: new Date(this.#clock.now()).toISOString(),
      pipeline: scope.pipeline,
      taskId: scope.taskId,
      kind,
      ...(route.from === undefined ? {} : { from: route.from }),
      ...(route.to === undefined ? {} : { to: route.to }),
      traceparent: scope.traceparent,
      data,
    };
    // Parsing here means a malformed event is a bug caught where it is made, not downstream.
    return TroupeEvent.parse(candidate) as EventOf<K>;
  }
}

/** Shortens text for events and logs, saying how much was left out. */
export function preview(text: string, max = 4_000): string {
  return text.length <= max ? text : `${text.slice(0, max)}…[${text.length - max} more characters]`;
}
