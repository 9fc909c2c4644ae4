import { AgentCard } from '@a2a-js/sdk';
import { CLIENT_WAIT, PipelineRegistry } from '@troupe/client';
import type { PipelineRegistration } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { authorize, mayTouch, type Principal } from '../auth.ts';
import { sendPlainError } from './a2aErrorAnswers.ts';
import { type CardOptions, gatewayCard, pipelineCard } from './agentCard.ts';

/** A2A's routes are described by the A2A spec and the cards, not by the gateway's OpenAPI document. */
export const HIDDEN = { schema: { hide: true } };

/** The agent cards a caller is shown: the gateway's, and each pipeline's it may see, at the URL clients reach. */
export class AgentCards {
  readonly #bus: JetStreamBus;
  readonly #options: { publicUrl: string | undefined; bearer: boolean; push: boolean };

  constructor(bus: JetStreamBus, options: { publicUrl: string | undefined; bearer: boolean; push: boolean }) {
    this.#bus = bus;
    this.#options = options;
  }

  /** What a card says of this gateway as `request` reached it. */
  optionsFor(request: FastifyRequest): CardOptions {
    return {
      baseUrl: (this.#options.publicUrl ?? `${request.protocol}://${request.host}`).replace(/\/+$/, ''),
      bearer: this.#options.bearer,
      push: this.#options.push,
    };
  }

  /** The pipeline's registration, when it is served and the caller may see it; undefined otherwise. */
  async registration(who: Principal, pipeline: string): Promise<PipelineRegistration | undefined> {
    if (!mayTouch(who, pipeline)) return undefined;
    return (await PipelineRegistry.open(this.#bus, CLIENT_WAIT)).get(pipeline);
  }

  /** The gateway's own card, listing the pipelines the caller may see. */
  async ofGateway(request: FastifyRequest, who: Principal): Promise<AgentCard> {
    const pipelines = (await (await PipelineRegistry.open(this.#bus, CLIENT_WAIT)).all()).filter((p) =>
      mayTouch(who, p.name),
    );
    return gatewayCard(pipelines, this.optionsFor(request));
  }

  /** The card a request at an endpoint is served under, for its version check and GetAgentCard. */
  async forEndpoint(
    request: FastifyRequest,
    who: Principal,
    pipeline: string | undefined,
  ): Promise<AgentCard> {
    if (pipeline === undefined) return gatewayCard([], this.optionsFor(request));
    const found = await this.registration(who, pipeline);
    return found
      ? pipelineCard(found, this.optionsFor(request))
      : pipelineCard(
          { name: pipeline, agents: [], steps: [], host: '', registeredAt: '' },
          this.optionsFor(request),
        );
  }
}

/** The gateway's card at `/.well-known/agent-card.json`, and each pipeline's at `/a2a/<pipeline>/.well-known/…`. */
export const agentCardRoutes: FastifyPluginAsync<{
  cards: AgentCards;
  principal: (request: FastifyRequest) => Principal;
}> = async (app, { cards, principal }) => {
  app.get('/.well-known/agent-card.json', HIDDEN, async (request, reply) => {
    try {
      const who = principal(request);
      authorize(who, 'read');
      return await serveCard(reply, await cards.ofGateway(request, who));
    } catch (error) {
      return sendPlainError(request, reply, error);
    }
  });

  app.get<{ Params: { pipeline: string } }>(
    '/a2a/:pipeline/.well-known/agent-card.json',
    HIDDEN,
    async (request, reply) => {
      try {
        const who = principal(request);
        authorize(who, 'read');
        const found = await cards.registration(who, request.params.pipeline);
        if (!found) {
          return reply.code(404).send({
            error: {
              code: 'not_found',
              message: `no pipeline named ${request.params.pipeline} is served here`,
            },
          });
        }
        return await serveCard(reply, pipelineCard(found, cards.optionsFor(request)));
      } catch (error) {
        return sendPlainError(request, reply, error);
      }
    },
  );
};

const serveCard = async (reply: FastifyReply, card: AgentCard) =>
  reply.header('cache-control', 'private, max-age=60').type('application/json').send(AgentCard.toJSON(card));
