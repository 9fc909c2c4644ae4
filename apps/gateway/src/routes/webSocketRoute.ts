import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayServices } from '../gatewayServices.ts';
import type { StopStream } from '../openStreams.ts';
import { principalOf } from '../requestAuth.ts';
import { WsSession } from '../ws.ts';

/** `GET /v1/ws`: one WebSocket per client, to follow tasks and act on them (see ws.ts), within the token's caps. */
export const webSocketRoute: FastifyPluginAsyncZod<GatewayServices> = async (app, services) => {
  const { actions, bus, quota, streams } = services;
  app.get(
    '/v1/ws',
    {
      websocket: true,
      schema: {
        summary: 'A WebSocket: follow tasks, submit, cancel, approve, deny and answer (see docs/gateway.md)',
      },
      // Refused as HTTP (429) while the upgrade can still be answered.
      preValidation: async (request) => quota.check(principalOf(request), 'streams'),
    },
    (socket, request) => {
      const who = principalOf(request);
      let release: () => void;
      try {
        release = quota.take(who, 'streams');
      } catch (error) {
        // Another connection of the token took the last slot since the check.
        socket.close(1013, (error as Error).message.slice(0, 120));
        return;
      }
      const session = new WsSession(socket, who, actions, bus, request.log, quota);
      const stop: StopStream = (why) =>
        why
          ? session.close(1008, `${why.code}: ${why.message}`)
          : session.close(1001, 'the gateway is closing');
      const letGo = streams.hold(stop, who);
      socket.on('close', () => {
        letGo();
        release();
      });
    },
  );
};
