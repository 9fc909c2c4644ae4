import type { A2ARequestHandler } from '@a2a-js/sdk/server';
import { ServerCallContext, validateVersion } from '@a2a-js/sdk/server';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { authorize, type Principal } from '../auth.ts';
import type { OpenStreams } from '../openStreams.ts';
import { versionOf } from './a2aRequest.ts';
import type { AgentCards } from './agentCardRoutes.ts';
import { guarded, internalError } from './guardedHandler.ts';
import { type A2aServices, PipelineAgent, SIGNAL_KEY } from './pipelineAgent.ts';

/** An A2A request ready to be handled: who asks, the SDK's call context, and the handler for its pipeline. */
export interface PreparedCall {
  who: Principal;
  context: ServerCallContext;
  handler: A2ARequestHandler;
}

/** What every A2A request needs, in either binding: who asks (refused without a token), the version it speaks, its handler. */
export class A2aCalls {
  readonly #services: A2aServices;
  readonly #cards: AgentCards;
  readonly #principal: (request: FastifyRequest) => Principal;
  readonly #open: OpenStreams;
  readonly #authenticated: boolean;

  constructor(options: {
    services: A2aServices;
    cards: AgentCards;
    principal: (request: FastifyRequest) => Principal;
    open: OpenStreams;
    authenticated: boolean;
  }) {
    this.#services = options.services;
    this.#cards = options.cards;
    this.#principal = options.principal;
    this.#open = options.open;
    this.#authenticated = options.authenticated;
  }

  /** Prepares a request of `binding` at `pipeline`'s endpoint (or the gateway's); `stopped` ends what it waits on. */
  async prepare(
    request: FastifyRequest,
    reply: FastifyReply,
    binding: 'JSONRPC' | 'HTTP+JSON',
    pipeline: string | undefined,
    stopped: AbortController,
  ): Promise<PreparedCall> {
    const who = this.#principal(request);
    // A request that waits (a blocking SendMessage) ends, answering the task as it stands, when the gateway closes.
    // Its connection closes with that answer: a closing server waits for every connection, a kept-alive one too.
    const held = () => {
      if (!reply.raw.headersSent) reply.header('connection', 'close');
      stopped.abort();
    };
    const release = this.#open.hold(held, who);
    reply.raw.on('close', release);
    if (pipeline !== undefined) authorize(who, 'read', pipeline);
    const card = await this.#cards.forEndpoint(request, who, pipeline);
    const requestedVersion = versionOf(request);
    const context = new ServerCallContext({
      user: { isAuthenticated: this.#authenticated, userName: who.name },
      ...(requestedVersion === undefined ? {} : { requestedVersion }),
    });
    context.state.set(SIGNAL_KEY, stopped.signal);
    // An absent version is 0.3, which this gateway does not speak: the spec's error says which it does.
    validateVersion(context.requestedVersion, card, binding);
    const handler = guarded(new PipelineAgent(this.#services, { who, pipeline, card }), (error) => {
      request.log.error({ err: error, route: request.routeOptions.url }, 'A2A request failed');
      return internalError(request.id);
    });
    return { who, context, handler };
  }
}
