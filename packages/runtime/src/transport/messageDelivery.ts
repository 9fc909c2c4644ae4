import type { Msg } from '@nats-io/transport-node';
import {
  type ErrorReply,
  errorMessage,
  type ParseResult,
  parseMessage,
  ROOT,
  subjects,
} from '@troupe/protocol';
import { z } from 'zod';
import {
  logMessage,
  logRefusedMessage,
  type MessageMeta,
  messageLogFields,
  replyMeta,
} from '../logging/messageLog.ts';
import type { Bus, Delivery, SubscribeOptions } from './bus.ts';
import { idsFromSubject, metaFromSubject, metaFromValue } from './messageMeta.ts';
import { fromMsgHdrs } from './natsHeaders.ts';

/** What delivering a message needs of its bus: its name and log, and a way to answer and to report. */
export type DeliveringBus = Pick<Bus, 'name' | 'logger' | 'messageLogLevel' | 'publish' | 'reportInvalid'>;

/** Marks a subscription that takes raw text (see {@link Bus.subscribeText}). */
export const TEXT = z.string();

/** Characters of an invalid payload quoted in its report. */
const PAYLOAD_EXCERPT = 2_000;

const lenientDecoder = new TextDecoder('utf-8', { fatal: false });

/**
 * Hands one received message to a subscription's handler: validated against `schema` (an invalid one is answered
 * with an `ErrorReply` when its sender asked for a reply, else reported on `troupe.events._invalid`), logged, and
 * with a `respond` that answers its sender. A handler that throws or rejects is logged and answered with
 * `handler_failed`. Returns the handler's work when it is asynchronous, for the subscription to wait on.
 */
export function deliverMessage<S extends z.ZodType>(
  bus: DeliveringBus,
  msg: Msg,
  schema: S,
  handler: (delivery: Delivery<z.infer<S>>) => void | Promise<void>,
  opts: SubscribeOptions<z.infer<S>>,
): Promise<void> | undefined {
  const parsed: ParseResult<z.infer<S>> =
    (schema as z.ZodType) === TEXT
      ? (decodeText(msg.data) as ParseResult<z.infer<S>>)
      : parseMessage(schema, msg.data);
  // A refused message's one line is the warning that says why.
  if (!parsed.ok) {
    rejectInvalid(bus, msg, parsed, opts.reporter ?? bus.name);
    return undefined;
  }
  const { subject } = msg;
  const reply = replyOf(msg);
  const meta = metaOf(bus, subject, parsed.value, opts.meta);
  logMessage(bus.logger, opts.messageLogLevel ?? bus.messageLogLevel, 'in', subject, meta);
  // The closures below hold the subject and reply as strings, never `msg`: a message's bytes are a view into the
  // socket's read buffer, so a handler that keeps `respond` (a step in flight does, for as long as it runs) would
  // keep that whole buffer, up to 64 KiB shared with other messages, alive.
  const answerMeta = () => replyMeta(meta, opts.reporter);
  const delivery: Delivery<z.infer<S>> = {
    subject,
    value: parsed.value,
    respond: (payload) => respond(bus, subject, reply, payload, answerMeta()),
  };
  if (reply !== undefined) delivery.reply = reply;
  const headers = fromMsgHdrs(msg.headers);
  if (headers !== undefined) delivery.headers = headers;
  try {
    const result = handler(delivery);
    if (result instanceof Promise)
      return result.catch((error: unknown) => handlerFailed(bus, subject, reply, error, meta, answerMeta()));
  } catch (error) {
    handlerFailed(bus, subject, reply, error, meta, answerMeta());
  }
  return undefined;
}

function decodeText(data: Uint8Array): ParseResult<string> {
  try {
    return { ok: true, value: new TextDecoder('utf-8', { fatal: true }).decode(data) };
  } catch {
    return { ok: false, reason: 'payload is not valid UTF-8', issues: [] };
  }
}

function metaOf<T>(
  bus: DeliveringBus,
  subject: string,
  value: T,
  custom: ((value: T) => MessageMeta) | undefined,
): MessageMeta {
  if (custom === undefined) return { ...metaFromSubject(subject), ...metaFromValue(value) };
  try {
    return custom(value);
  } catch (error) {
    bus.logger.warn({ err: error, subject }, `meta function for ${subject} threw; logging without it`);
    return metaFromSubject(subject);
  }
}

function rejectInvalid(
  bus: DeliveringBus,
  msg: Msg,
  parsed: Extract<ParseResult<unknown>, { ok: false }>,
  reporter: string,
): void {
  const { reason, issues } = parsed;
  // Reports pass every `troupe.events.>` subscriber; one that expects events must not report a report.
  const reply = replyOf(msg);
  const meta = metaFromSubject(msg.subject);
  if (msg.subject === subjects.invalid && reply === undefined) {
    bus.logger.debug(
      messageLogFields('in', msg.subject, meta),
      'ignored an invalid-message report that does not match this schema',
    );
    return;
  }
  logRefusedMessage(bus.logger, msg.subject, reason, {
    meta,
    message: `invalid message on ${msg.subject}: ${reason}`,
    fields: { reporter, issues },
  });
  if (reply !== undefined) {
    const answer: ErrorReply = { ok: false, error: { code: 'invalid_message', message: reason } };
    respond(bus, msg.subject, reply, answer, replyMeta(meta, reporter));
    return;
  }
  bus.reportInvalid({
    subject: msg.subject,
    reporter,
    reason,
    issues,
    payload: lenientDecoder.decode(msg.data).slice(0, PAYLOAD_EXCERPT),
    ...idsFromSubject(msg.subject),
  });
}

function handlerFailed(
  bus: DeliveringBus,
  subject: string,
  reply: string | undefined,
  error: unknown,
  meta: MessageMeta,
  answerMeta: MessageMeta,
): void {
  const message = `handler for ${subject} failed: ${errorMessage(error)}`;
  bus.logger.error({ err: error, subject, ...meta }, message);
  if (reply === undefined) return;
  const answer: ErrorReply = { ok: false, error: { code: 'handler_failed', message } };
  respond(bus, subject, reply, answer, answerMeta);
}

// A failed reply is the requester's timeout to handle; it must not take down the handler's caller.
function respond(
  bus: DeliveringBus,
  subject: string,
  reply: string | undefined,
  payload: unknown,
  meta: MessageMeta,
): void {
  if (reply === undefined) {
    bus.logger.debug({ subject }, `no reply was asked for on ${subject}; response dropped`);
    return;
  }
  try {
    bus.publish(reply, payload, meta);
  } catch (error) {
    bus.logger.warn({ err: error, subject }, `could not reply on ${subject}: ${errorMessage(error)}`);
  }
}

const EVENTS_PREFIX = `${ROOT}.events.`;

/** The subject the sender waits on; nats.js gives an empty string when there is none. */
function replyOf(msg: Msg): string | undefined {
  if (msg.reply === undefined || msg.reply === '') return undefined;
  // An event's reply subject is where its publisher awaits JetStream's ack: no question for subscribers.
  if (msg.subject.startsWith(EVENTS_PREFIX)) return undefined;
  return msg.reply;
}
