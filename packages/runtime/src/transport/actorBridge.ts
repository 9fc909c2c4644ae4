import type { z } from 'zod';
import type { Bus, BusSubscription, Delivery, SubscribeOptions } from './bus.ts';

/** The one thing a bridge needs of an actor: XState's `send`. */
export interface EventReceiver<E> {
  send(event: E): void;
}

/**
 * Delivers every valid message on `subject` into `actor.send()`, turned into an actor event by `toEvent`.
 * Invalid messages are answered or reported by the bus and never reach the actor.
 *
 * @example
 * bridgeToActor(bus, subjects.control(taskId), ControlMessage, workflow, (msg) => ({ type: 'CANCEL', reason: msg.reason }), {
 *   reporter: 'coordinator',
 * });
 */
export function bridgeToActor<S extends z.ZodType, E>(
  bus: Bus,
  subject: string,
  schema: S,
  actor: EventReceiver<E>,
  toEvent: (value: z.infer<S>, delivery: Delivery<z.infer<S>>) => E,
  opts: SubscribeOptions<z.infer<S>> = {},
): BusSubscription {
  return bus.subscribe(subject, schema, (delivery) => actor.send(toEvent(delivery.value, delivery)), opts);
}
