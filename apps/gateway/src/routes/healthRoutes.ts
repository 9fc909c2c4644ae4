import { CLIENT_WAIT, PipelineRegistry } from '@troupe/client';
import { errorMessage, Health, ReadyQuery, STREAMS } from '@troupe/protocol';
import { type JetStreamBus, probeJetStream } from '@troupe/runtime';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayServices } from '../gatewayServices.ts';

/**
 * `GET /healthz` (NATS and JetStream answer) and `GET /readyz` (Troupe's streams are there, and with `?pipeline=`,
 * a coordinator has served each named pipeline): 200 or 503, with what is missing. No token needed.
 */
export const healthRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { bus }) => {
  app.get('/healthz', { schema: { response: { 200: Health, 503: Health } } }, async (_request, reply) => {
    const health = await checkHealth(bus, false);
    return reply.code(health.ok ? 200 : 503).send(health);
  });

  app.get(
    '/readyz',
    { schema: { querystring: ReadyQuery, response: { 200: Health, 503: Health } } },
    async (request, reply) => {
      const health = await checkHealth(bus, true);
      const wanted = [request.query.pipeline ?? []]
        .flat()
        .flatMap((names) => names.split(','))
        .filter(Boolean);
      const ready = health.ok && wanted.length > 0 ? await checkPipelines(bus, health, wanted) : health;
      return reply.code(ready.ok ? 200 : 503).send(ready);
    },
  );
};

async function checkHealth(bus: JetStreamBus, ready: boolean): Promise<Health> {
  const probe = await probeJetStream(bus, ready ? [STREAMS.events, STREAMS.tasks] : []);
  const nats = probe.connection;
  if (nats === 'closed') return { ok: false, nats, message: 'the NATS connection is closed' };
  if (probe.jetstreamError) {
    return { ok: false, nats, jetstream: 'unreachable', message: probe.jetstreamError.message };
  }
  if (!ready) return { ok: nats === 'connected', nats, jetstream: 'ok' };
  if (probe.missingStream) {
    return {
      ok: false,
      nats,
      jetstream: 'ok',
      streams: 'missing',
      message: `no Troupe coordinator has made its streams on this server (${probe.missingStream.error.message})`,
    };
  }
  return { ok: nats === 'connected', nats, jetstream: 'ok', streams: 'ok' };
}

/**
 * Ready for these pipelines: a coordinator has served each, so its consumer exists. (A task published before that is
 * kept and runs once one does; this tells a client that it will not wait for a deploy.)
 */
async function checkPipelines(bus: JetStreamBus, health: Health, wanted: string[]): Promise<Health> {
  try {
    const known = await (await PipelineRegistry.open(bus, CLIENT_WAIT)).names();
    const missing = wanted.filter((name) => !known.includes(name));
    if (missing.length === 0) return { ...health, pipelines: 'ok' };
    return {
      ...health,
      ok: false,
      pipelines: 'missing',
      message: `no coordinator has served ${missing.map((name) => `"${name}"`).join(', ')} yet; served: ${known.join(', ') || 'none'}`,
    };
  } catch (error) {
    return {
      ...health,
      ok: false,
      pipelines: 'missing',
      message: `cannot read the pipeline registry: ${errorMessage(error)}`,
    };
  }
}
