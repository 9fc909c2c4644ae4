import { eventsAfter, followAllEvents, followTaskEvents } from '@troupe/client';
import { AllEventsQuery, ErrorBody, EventsQuery, NoMoreEvents, TaskParams } from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { AgUiMapper } from '../agui.ts';
import { authorize, mayTouch } from '../auth.ts';
import { resumeAfter, streamSse } from '../eventStream.ts';
import type { GatewayServices } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';
import { isQueued } from '../taskView.ts';

/** Events as Server-Sent Events: one task's (as Troupe's events or AG-UI's), or every task's the token may read. */
export const eventRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, services) => {
  const { bus, actions } = services;
  const streams = { open: services.streams, quota: services.quota };

  app.get(
    '/v1/tasks/:id/events',
    {
      schema: {
        summary: 'The task’s events as Server-Sent Events: history first, then live; resumable',
        description:
          'Each SSE id is the event’s sequence in the EVENTS stream: reconnect with `Last-Event-ID` (or `?after=`) ' +
          'to get what came after it, with nothing lost or repeated. The stream ends after the task’s final event. ' +
          '`?format=ag-ui` sends the same flow as AG-UI events.',
        params: TaskParams,
        querystring: EventsQuery,
        response: {
          204: NoMoreEvents,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      // A task still queued is followed too: its events come once a coordinator takes it.
      const record = await actions.followable(principalOf(request), request.params.id);
      const mapper =
        request.query.format === 'ag-ui'
          ? new AgUiMapper(record.metadata?.session ?? record.taskId)
          : undefined;
      // A browser reconnects when a stream ends: after a task's last event, 204 tells it there is nothing more.
      const after = resumeAfter(request);
      if (
        !isQueued(record) &&
        record.status !== 'running' &&
        after !== undefined &&
        (await eventsAfter(bus, record, after)) === 0
      ) {
        return reply.code(204).send(null);
      }
      await streamSse(request, reply, streams, mapper, (from, signal, onEvent) =>
        followTaskEvents(bus, record, {
          ...(from === undefined ? {} : { after: from }),
          signal,
          onEvent,
        }),
      );
    },
  );

  app.get(
    '/v1/events',
    {
      schema: {
        summary:
          'Every task’s events as they are stored (one pipeline’s with `?pipeline=`), as Server-Sent Events',
        description:
          'Live from the moment of connecting; `Last-Event-ID` (or `?after=`) resumes after a stream sequence. Only ' +
          'the events of pipelines the token may read are sent. The stream does not end by itself.',
        querystring: AllEventsQuery,
        response: { 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request, reply) => {
      const who = principalOf(request);
      authorize(who, 'read', request.query.pipeline);
      await streamSse(request, reply, streams, undefined, (after, signal, onEvent, stream) =>
        followAllEvents(bus, {
          ...(after === undefined ? {} : { after }),
          pipeline: request.query.pipeline,
          signal,
          onEvent: (sequenced) => (mayTouch(who, sequenced.event.pipeline) ? onEvent(sequenced) : undefined),
          // Live from now: the client is told when "now" is, so it knows nothing stored since will be missed.
          onReady: () => stream.send({ event: 'ready', data: { live: true } }),
        }),
      );
    },
  );
};
