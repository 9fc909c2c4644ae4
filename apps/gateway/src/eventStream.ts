import type { SequencedEvent } from '@troupe/client';
import { errorMessage } from '@troupe/protocol';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AgUiMapper } from './agui.ts';
import { GATEWAY_STOPPING, type OpenStreams, type StopStream, type StreamEnd } from './openStreams.ts';
import { ANONYMOUS } from './requestAuth.ts';
import { routeOf } from './requestRoute.ts';
import { corsHeaders, SseStream } from './sse.ts';
import type { StreamQuota } from './streamQuota.ts';

/** Where the events of a stream come from: called once, it sends each to `onEvent` until `signal` aborts. */
export type FollowEvents = (
  after: number | undefined,
  signal: AbortSignal,
  onEvent: (event: SequencedEvent) => Promise<void>,
  stream: SseStream,
) => Promise<void>;

/** Where a client resumes: the `Last-Event-ID` of its reconnect first (EventSource keeps its URL), else `?after=`. */
export function resumeAfter(request: FastifyRequest): number | undefined {
  const header = request.headers['last-event-id'];
  const lastId = Number.parseInt(Array.isArray(header) ? (header[0] ?? '') : (header ?? ''), 10);
  if (Number.isSafeInteger(lastId) && lastId >= 0) return lastId;
  return (request.query as { after?: number }).after;
}

/**
 * Streams events as Server-Sent Events: resuming after the client's `Last-Event-ID` (or `?after=`), each event with
 * its stream sequence as id (in AG-UI form, only the last event of a group carries it, so a resume skips none of
 * the rest), until the source ends, the client goes, or the gateway stops.
 */
export async function streamSse(
  request: FastifyRequest,
  reply: FastifyReply,
  streams: { open: OpenStreams; quota: StreamQuota },
  mapper: AgUiMapper | undefined,
  follow: FollowEvents,
): Promise<void> {
  const after = resumeAfter(request);
  const who = request.principal ?? ANONYMOUS;
  // Slots taken while a refusal can still be an HTTP answer (429); given back however the stream ends.
  const releaseStream = streams.quota.take(who, 'streams');
  let releaseConsumer: () => void;
  try {
    releaseConsumer = streams.quota.take(who, 'consumers');
  } catch (error) {
    releaseStream();
    throw error;
  }
  reply.hijack();
  const stream = new SseStream(reply.raw, corsHeaders(reply));
  const stopped = new AbortController();
  let why: StreamEnd | undefined;
  const stop: StopStream = (reason) => {
    why ??= reason;
    stopped.abort();
  };
  reply.raw.on('close', () => stop());
  const letGo = streams.open.hold(stop, who);
  // The client may have gone while the request was checked: its close came before anyone listened.
  if (request.raw.socket?.destroyed || reply.raw.destroyed) stop();
  try {
    if (!stopped.signal.aborted) await follow(after, stopped.signal, sendEach(stream, mapper), stream);
  } catch (error) {
    request.log.warn({ err: error, route: routeOf(request) }, 'event stream ended by an error');
    if (!stream.closed)
      await stream.send({ event: 'error', data: { code: 'unavailable', message: errorMessage(error) } });
  } finally {
    // Stopped with no reason: the gateway is stopping, which the client is told, so it connects again elsewhere.
    if (stopped.signal.aborted && !stream.closed)
      await stream.send({ event: 'error', data: why ?? GATEWAY_STOPPING });
    letGo();
    releaseConsumer();
    releaseStream();
    stream.end();
  }
}

/** Sends an event as itself, or as the AG-UI events it maps to, the last of them with its sequence as id. */
function sendEach(stream: SseStream, mapper: AgUiMapper | undefined) {
  return async ({ seq, event }: SequencedEvent): Promise<void> => {
    if (!mapper) return stream.send({ id: seq, event: event.kind, data: event });
    const mapped = mapper.map(event);
    for (const [i, agui] of mapped.entries()) {
      await stream.send({ ...(i === mapped.length - 1 ? { id: seq } : {}), data: agui });
    }
  };
}
