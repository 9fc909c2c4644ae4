import type { JetStreamBus, Logger } from '@troupe/runtime';
import { ValueStore } from '@troupe/runtime';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { GatewayActions } from '../actions.ts';
import type { Principal, TokenStore } from '../auth.ts';
import type { OpenStreams } from '../openStreams.ts';
import { ANONYMOUS } from '../requestAuth.ts';
import type { Sessions } from '../sessions.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { TaskIds } from '../taskIds.ts';
import { A2aCalls } from './a2aCall.ts';
import { A2A_CONTENT_TYPE, answerFastifyRefusals } from './a2aErrorAnswers.ts';
import { AgentCards, agentCardRoutes } from './agentCardRoutes.ts';
import { jsonRpcRoutes } from './jsonRpcRoutes.ts';
import type { A2aServices } from './pipelineAgent.ts';
import { PushConfigs } from './pushConfigs.ts';
import type { PushUrlPolicy } from './pushUrls.ts';
import { restRoutes } from './restRoutes.ts';
import { TaskReader } from './taskReader.ts';

export interface A2aRoutesOptions {
  bus: JetStreamBus;
  actions: GatewayActions;
  sessions: Sessions;
  tokens: TokenStore;
  auth: 'tokens' | 'none';
  logger: Logger;
  /** The gateway's URL as clients reach it; else the URL each request came to. */
  publicUrl?: string | undefined;
  /** Push notifications: where webhooks may go; `false` offers none. */
  push: { urlPolicy?: PushUrlPolicy } | false;
  /** The gateway's per-token caps on open streams, and the streams it ends when a token is revoked. */
  streams: { quota: StreamQuota; open: OpenStreams };
  /** The longest a blocking SendMessage waits, in ms (10 minutes). */
  blockingMs?: number;
  /** The gateway's id secret: the same message id from the same token is the same task on every gateway. */
  idSecret?: Uint8Array | string | undefined;
}

/** How long CancelTask waits for the coordinator to record the cancel before answering with the task as it is. */
const CANCEL_WAIT_MS = 15_000;

/**
 * The gateway's A2A server (v1.0): every pipeline an A2A agent with its card at `/a2a/<pipeline>/.well-known/
 * agent-card.json` and both bindings (JSON-RPC at `…/jsonrpc`, HTTP+JSON under `…/rest`); the gateway's own card at
 * `/.well-known/agent-card.json`, whose endpoints serve every pipeline by `tenant`. Requests carry the gateway's
 * bearer tokens; a token's scopes and pipelines apply to every method.
 */
export const a2aRoutes: FastifyPluginAsync<A2aRoutesOptions> = async (app, options) => {
  const { bus, logger } = options;
  const push = options.push;
  const services: A2aServices = {
    bus,
    actions: options.actions,
    sessions: options.sessions,
    reader: new TaskReader(bus, new ValueStore(bus)),
    pushConfigs: push === false ? undefined : () => PushConfigs.open(bus, push),
    quota: options.streams.quota,
    ids: options.idSecret === undefined ? TaskIds.random() : new TaskIds(options.idSecret),
    blockingMs: options.blockingMs ?? 600_000,
    cancelWaitMs: CANCEL_WAIT_MS,
  };

  // Bodies are read here, not by the gateway's parser: a JSON-RPC body that is not JSON is answered -32700 in the
  // binding's own form, and A2A's media type is taken beside JSON's.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(['application/json', A2A_CONTENT_TYPE], { parseAs: 'string' }, (_r, body, done) =>
    done(null, { text: body as string }),
  );
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, _body, done) =>
    done(null, { unsupported: request.headers['content-type'] ?? 'none' }),
  );

  answerFastifyRefusals(app);

  const principal = (request: FastifyRequest): Principal =>
    options.auth === 'none' ? ANONYMOUS : options.tokens.authenticate(request.headers.authorization);
  const cards = new AgentCards(bus, {
    publicUrl: options.publicUrl,
    bearer: options.auth !== 'none',
    push: push !== false,
  });
  await app.register(agentCardRoutes, { cards, principal });

  const calls = new A2aCalls({
    services,
    cards,
    principal,
    open: options.streams.open,
    authenticated: options.auth !== 'none',
  });
  await app.register(jsonRpcRoutes, { calls, streams: options.streams });
  await app.register(restRoutes, { calls, streams: options.streams });

  logger.debug('A2A server ready');
};
