import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { eventsOf, STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, eventually, startServer } from './natsFixture.ts';

/*
 * Event batching in two processes: a step's events published by a worker, its reply, and the task.* event the
 * coordinator publishes on that reply. A batch waits a little for more events (its linger), so unless a message the
 * bus sends after an event sends the open batches first, the coordinator's task.completed is stored before the
 * worker's last events: readers that stop at a task's end (followTaskEvents, troupe logs --follow, the SSE stream)
 * never see them, and `troupe logs` shows them after the end.
 */

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

function toolCall(taskId: string, n: number): TroupeEvent {
  return {
    id: `${taskId}:tool.call:s-1:1:${n}`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'tool.call',
    traceparent: TRACEPARENT,
    data: { agent: 'coder', stepId: 's-1', callId: `c-${n}`, tool: 'read', arguments: '{}' },
  };
}

/** A `task.*` event, never batched: the one a coordinator publishes as a step's reply comes in. */
function accepted(taskId: string): TroupeEvent {
  return {
    id: `${taskId}:task.accepted`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'task.accepted',
    traceparent: TRACEPARENT,
    data: { goal: 'go' },
  };
}

let server: EmbeddedNats;
let raw: NatsConnection;
let worker: NatsBus;
let coordinator: NatsBus;

beforeAll(async () => {
  server = await startServer();
  raw = await connect({ servers: server.url });
  const logger = captureLogger().logger;
  worker = await NatsBus.connect({ servers: server.url, name: 'worker', logger, eventBatch: true });
  coordinator = await NatsBus.connect({ servers: server.url, name: 'coordinator', logger, eventBatch: true });
  await ensureTroupeStreams(coordinator);
  // Each outbox has found the stream and is sending: no probe delays the events under test.
  await Promise.all([
    worker.publishEvent(accepted('bc-warm-1')),
    coordinator.publishEvent(accepted('bc-warm-2')),
  ]);
});

afterAll(async () => {
  await worker?.close();
  await coordinator?.close();
  await raw?.close();
  await server?.stop();
});

/** The ids of a task's events in the order the EVENTS stream stored them. */
async function storedIds(taskId: string): Promise<string[]> {
  const jsm = await jetstreamManager(raw);
  const { state } = await jsm.streams.info(STREAMS.events);
  const ids: string[] = [];
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const msg = await jsm.streams.getMessage(STREAMS.events, { seq }).catch(() => null);
    if (!msg?.subject.startsWith(`troupe.events.demo.${taskId}.`)) continue;
    const parsed = eventsOf(msg.data, msg.subject);
    if (!parsed.ok) throw new Error(parsed.reason);
    ids.push(...parsed.value.map((e) => e.id));
  }
  return ids;
}

/** The ids of a task's events as `bus` hears them live (a batch is its events), in the order they arrive. */
function hear(bus: NatsBus, taskId: string): { ids: string[]; stop(): void } {
  const ids: string[] = [];
  const subscription = bus.subscribeText(subjects.taskEvents(taskId, 'demo'), (delivery) => {
    const parsed = eventsOf(delivery.value, delivery.subject);
    if (parsed.ok) ids.push(...parsed.value.map((e) => e.id));
  });
  return { ids, stop: () => subscription.unsubscribe() };
}

describe('event batching across processes', () => {
  it('sends the events a responder published before its reply ahead of the reply', async () => {
    const task = 'bc-reply';
    const calls = [1, 2, 3].map((n) => toolCall(task, n));
    const heard = hear(coordinator, task);
    const serving = worker.subscribe('troupe.agents.demo.coder', z.unknown(), (delivery) => {
      for (const event of calls) void worker.publishEvent(event);
      delivery.respond({ ok: true });
    });
    await Promise.all([worker.flush(), coordinator.flush()]);
    // One connection's messages reach another in the order sent: the events came before the reply, or not yet.
    let heardBeforeReply: string[] | undefined;
    const stop = coordinator.requestReplies('troupe.agents.demo.coder', {}, () => {
      heardBeforeReply ??= [...heard.ids];
      void coordinator.publishEvent(accepted(task));
    });
    await eventually(
      () => heardBeforeReply !== undefined && worker.pendingEvents === 0 && coordinator.pendingEvents === 0,
    );
    stop();
    serving.unsubscribe();
    heard.stop();
    expect(heardBeforeReply).toEqual(calls.map((e) => e.id));
    expect(await storedIds(task)).toEqual([...calls.map((e) => e.id), accepted(task).id]);
  });

  it('sends the events a requester published before its request ahead of the request', async () => {
    const task = 'bc-request';
    const calls = [1, 2].map((n) => toolCall(task, n));
    const heard = hear(worker, task);
    let heardBeforeRequest: string[] | undefined;
    const serving = worker.subscribe('troupe.agents.demo.planner', z.unknown(), () => {
      heardBeforeRequest = [...heard.ids];
      void worker.publishEvent(accepted(task));
    });
    await Promise.all([worker.flush(), coordinator.flush()]);
    for (const event of calls) void coordinator.publishEvent(event);
    const stop = coordinator.requestReplies('troupe.agents.demo.planner', {}, () => {});
    await eventually(
      () => heardBeforeRequest !== undefined && worker.pendingEvents === 0 && coordinator.pendingEvents === 0,
    );
    stop();
    serving.unsubscribe();
    heard.stop();
    expect(heardBeforeRequest).toEqual(calls.map((e) => e.id));
    expect(await storedIds(task)).toEqual([...calls.map((e) => e.id), accepted(task).id]);
  });
});
