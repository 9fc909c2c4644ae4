import { ContentTypeNotSupportedError } from '@a2a-js/sdk/errors';
import { JsonRpcTransportHandler } from '@a2a-js/sdk/server';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { OpenStreams } from '../openStreams.ts';
import type { StreamQuota } from '../streamQuota.ts';
import type { A2aCalls, PreparedCall } from './a2aCall.ts';
import { A2A_CONTENT_TYPE, isStream, refusalIn, rpcError, sendRpcRefusal } from './a2aErrorAnswers.ts';
import { checkParams, parseRpc } from './a2aRequest.ts';
import { streamOut } from './a2aStream.ts';
import { HIDDEN } from './agentCardRoutes.ts';

/** A2A's JSON-RPC binding: `POST /a2a/jsonrpc` (every pipeline, by `tenant`) and `POST /a2a/<pipeline>/jsonrpc`. */
export const jsonRpcRoutes: FastifyPluginAsync<{
  calls: A2aCalls;
  streams: { quota: StreamQuota; open: OpenStreams };
}> = async (app, { calls, streams }) => {
  const jsonRpcRoute = async (request: FastifyRequest, reply: FastifyReply, pipeline: string | undefined) => {
    const body = request.body as { text?: string; unsupported?: string } | undefined;
    let rpc: Record<string, unknown>;
    try {
      if (body?.unsupported !== undefined) {
        throw new ContentTypeNotSupportedError(
          `content type ${body.unsupported} is not taken: send application/json or ${A2A_CONTENT_TYPE}`,
        );
      }
      rpc = parseRpc(body?.text ?? '');
    } catch (error) {
      return reply.send(rpcError(null, error));
    }
    const id = rpc.id === undefined ? null : (rpc.id as string | number | null);
    const stopped = new AbortController();
    // A client that goes stops what its request waits on (a blocking SendMessage's consumer).
    reply.raw.on('close', () => stopped.abort());
    let prepared: PreparedCall;
    try {
      prepared = await calls.prepare(request, reply, 'JSONRPC', pipeline, stopped);
      // Its token and version first: a caller without a token learns nothing of the params.
      checkParams(rpc);
    } catch (error) {
      return sendRpcRefusal(request, reply, id, error);
    }
    const answer = await new JsonRpcTransportHandler(prepared.handler).handle(rpc, prepared.context);
    if (!isStream(answer)) {
      const refusal = refusalIn(answer);
      if (refusal) return reply.code(refusal.status).send(answer);
      return reply.send(answer);
    }
    return streamOut(request, reply, streams, prepared.who, stopped, answer, {
      first: (error) => sendRpcRefusal(request, reply, id, error),
      event: (item) => item,
      error: (error) => rpcError(id, error),
    });
  };

  app.post('/a2a/jsonrpc', HIDDEN, (request, reply) => jsonRpcRoute(request, reply, undefined));
  app.post<{ Params: { pipeline: string } }>('/a2a/:pipeline/jsonrpc', HIDDEN, (request, reply) =>
    jsonRpcRoute(request, reply, request.params.pipeline),
  );
};
