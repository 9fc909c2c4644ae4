import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth.ts';
import type { OpenStreams } from '../openStreams.ts';
import { corsHeaders, SseStream } from '../sse.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { TransportRefusal } from './a2aErrors.ts';

/**
 * Streams an answer as Server-Sent Events once its first item is there: an error before it is an ordinary error
 * answer (`first`), one after it an `error` event. Ends when the stream does, the client goes, the gateway
 * closes, or the token is revoked.
 */
export async function streamOut(
  request: FastifyRequest,
  reply: FastifyReply,
  streams: { quota: StreamQuota; open: OpenStreams },
  who: Principal,
  stopped: AbortController,
  stream: AsyncGenerator<unknown>,
  write: {
    first: (error: unknown) => unknown;
    event: (item: unknown) => unknown;
    error: (error: unknown) => unknown;
  },
) {
  const { quota, open } = streams;
  let releaseStream: () => void;
  let releaseConsumer: () => void;
  let first: IteratorResult<unknown>;
  try {
    releaseStream = quota.take(who, 'streams');
    try {
      releaseConsumer = quota.take(who, 'consumers');
    } catch (error) {
      releaseStream();
      throw error;
    }
  } catch (error) {
    await stream.return(undefined);
    return write.first(error);
  }
  try {
    first = await stream.next();
  } catch (error) {
    releaseConsumer();
    releaseStream();
    return write.first(error);
  }
  reply.hijack();
  const sse = new SseStream(reply.raw, corsHeaders(reply));
  let why: { code: string; message: string } | undefined;
  const stop = (reason?: { code: string; message: string }) => {
    why ??= reason;
    stopped.abort();
  };
  reply.raw.on('close', () => stop());
  const letGo = open.hold(stop, who);
  try {
    if (!first.done) await sse.send({ data: write.event(first.value) });
    while (!stopped.signal.aborted && !sse.closed) {
      const next = await stream.next();
      if (next.done) break;
      await sse.send({ data: write.event(next.value) });
    }
  } catch (error) {
    request.log.warn({ err: error, route: request.routeOptions.url }, 'A2A stream ended by an error');
    if (!sse.closed) await sse.send({ event: 'error', data: write.error(error) });
  } finally {
    // Stopped from outside (the gateway closing, the token revoked), not ended by its task.
    const stoppedOutside = stopped.signal.aborted;
    if (why && !sse.closed)
      await sse.send({ event: 'error', data: write.error(new TransportRefusal(401, why.message)) });
    letGo();
    stopped.abort();
    await stream.return(undefined).catch(() => undefined);
    releaseConsumer();
    releaseStream();
    sse.end();
    // Its connection goes too: a closing server waits for every connection, a kept-alive one too.
    if (stoppedOutside) request.raw.socket?.end();
  }
}
