import { jetstream } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { subjects, type TroupeEvent } from '@troupe/protocol';
import { connectBus, ensureTroupeStreams, type JetStreamBus } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { followTaskEvents, type SequencedEvent } from '../src/storedEvents.ts';
import { readTaskEvents } from '../src/taskOperations.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
const TASK = { taskId: 't-batched', pipeline: 'demo' };

function toolCall(n: number): TroupeEvent {
  return {
    id: `${TASK.taskId}:tool.call:s-1:1:${n}`,
    ts: new Date(0).toISOString(),
    pipeline: TASK.pipeline,
    taskId: TASK.taskId,
    kind: 'tool.call',
    traceparent: TRACEPARENT,
    data: { agent: 'coder', stepId: 's-1', callId: `c-${n}`, tool: 'read', arguments: '{}' },
  };
}

const completed: TroupeEvent = {
  id: `${TASK.taskId}:task.completed`,
  ts: new Date(0).toISOString(),
  pipeline: TASK.pipeline,
  taskId: TASK.taskId,
  kind: 'task.completed',
  traceparent: TRACEPARENT,
  data: {
    output: 'done',
    rounds: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    usageByAgent: {},
    durationMs: 1,
  },
};

let nats: TestNats;
let bus: JetStreamBus;
let raw: NatsConnection;

/**
 * The EVENTS stream as a run and its resumption leave it: a batch of calls 1–3, then (the resumed run grouping the
 * same facts differently) a batch of calls 2–4, then the final event alone.
 */
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'batched-events-test', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
  raw = await connect({ servers: nats.url });
  const js = jetstream(raw);
  const batchSubject = subjects.eventBatch(TASK.pipeline, TASK.taskId);
  await js.publish(batchSubject, JSON.stringify({ batch: 'b-1', events: [1, 2, 3].map(toolCall) }), {
    msgID: 'b-1',
  });
  await js.publish(batchSubject, JSON.stringify({ batch: 'b-2', events: [2, 3, 4].map(toolCall) }), {
    msgID: 'b-2',
  });
  await js.publish(subjects.event(TASK.pipeline, TASK.taskId, 'task.completed'), JSON.stringify(completed), {
    msgID: completed.id,
  });
});

afterAll(async () => {
  await raw?.close();
  await bus?.close();
  await nats?.stop();
});

const wanted = [...[1, 2, 3, 4].map((n) => toolCall(n).id), completed.id];

describe('a task’s events stored in batches', () => {
  it('are read back by readTaskEvents one by one, in order, the same fact in two batches once', async () => {
    expect((await readTaskEvents(bus, TASK.taskId, TASK.pipeline)).map((e) => e.id)).toEqual(wanted);
  });

  it('are followed one by one, each fact once; only a batch’s last event has the batch’s sequence', async () => {
    const seen: SequencedEvent[] = [];
    await followTaskEvents(bus, TASK, {
      signal: new AbortController().signal,
      onEvent: (e) => void seen.push(e),
    });
    expect(seen.map((e) => e.event.id)).toEqual(wanted);
    // b-1 is sequence 1, b-2 is 2 (its first two facts came in b-1 already), the final event 3.
    expect(seen.map((e) => e.seq)).toEqual([0, 0, 1, 2, 3]);
  });

  it('sends a client that resumes half-way through a batch the whole batch again, never only its rest', async () => {
    // The client had calls 1 and 2 (sequence 0 each): it resumes after 0.
    const seen: string[] = [];
    await followTaskEvents(bus, TASK, {
      after: 0,
      signal: new AbortController().signal,
      onEvent: (e) => void seen.push(e.event.id),
    });
    expect(seen).toEqual(wanted);
  });
});
