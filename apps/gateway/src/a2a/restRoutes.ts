import { StreamResponse } from '@a2a-js/sdk';
import { ContentTypeNotSupportedError } from '@a2a-js/sdk/errors';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { OpenStreams } from '../openStreams.ts';
import type { StreamQuota } from '../streamQuota.ts';
import type { A2aCalls } from './a2aCall.ts';
import { A2A_CONTENT_TYPE, restErrorBody, sendRestError } from './a2aErrorAnswers.ts';
import { parseJson } from './a2aRequest.ts';
import { streamOut } from './a2aStream.ts';
import { HIDDEN } from './agentCardRoutes.ts';
import { restCall } from './restBinding.ts';

/** A2A's HTTP+JSON binding: every method under `/a2a/rest/…` (by `tenant`) and `/a2a/<pipeline>/rest/…`. */
export const restRoutes: FastifyPluginAsync<{
  calls: A2aCalls;
  streams: { quota: StreamQuota; open: OpenStreams };
}> = async (app, { calls, streams }) => {
  const restRoute = async (
    request: FastifyRequest<{ Params: { pipeline?: string; '*': string } }>,
    reply: FastifyReply,
  ) => {
    reply.type(A2A_CONTENT_TYPE);
    const pipeline = request.params.pipeline;
    const stopped = new AbortController();
    reply.raw.on('close', () => stopped.abort());
    try {
      const body = request.body as { text?: string; unsupported?: string } | undefined;
      if (body?.unsupported !== undefined) {
        throw new ContentTypeNotSupportedError(
          `content type ${body.unsupported} is not taken: send ${A2A_CONTENT_TYPE} or application/json`,
        );
      }
      const parsed = body?.text === undefined || body.text === '' ? {} : parseJson(body.text);
      const call = restCall(
        request.method,
        request.params['*'],
        request.query as Record<string, string | undefined>,
        parsed,
      );
      const { who, context, handler } = await calls.prepare(request, reply, 'HTTP+JSON', pipeline, stopped);
      if (call.kind === 'once') {
        const { status, body: answer } = await call.run(handler, context);
        return status === 204 ? reply.code(204).send() : reply.code(status).send(answer);
      }
      return await streamOut(request, reply, streams, who, stopped, call.run(handler, context), {
        first: (error) => sendRestError(request, reply, error),
        event: (item) => StreamResponse.toJSON(item as StreamResponse),
        error: (error) => restErrorBody(error).body,
      });
    } catch (error) {
      return sendRestError(request, reply, error);
    }
  };

  app.all('/a2a/rest/*', HIDDEN, restRoute);
  app.all('/a2a/:pipeline/rest/*', HIDDEN, restRoute);
};
