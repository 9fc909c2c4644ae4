import { BUCKETS, subjects, WorkflowRecord } from '@troupe/protocol';
import { connectBus, ensureTroupeStreams, type JetStreamBus, KvStore } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayActions } from '../src/actions.ts';
import type { Principal } from '../src/auth.ts';

let nats: TestNats;
let bus: JetStreamBus;
let coordinator: JetStreamBus;
const heard: string[] = [];

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'gateway', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
  coordinator = await connectBus({ servers: nats.url, name: 'coordinator', logger: captureLogger().logger });
  const now = new Date().toISOString();
  const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  await store.put('slow-1', {
    taskId: 'slow-1',
    pipeline: 'demo',
    streamSequence: 1,
    status: 'running',
    state: 'plan',
    goal: 'g',
    round: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    createdAt: now,
    updatedAt: now,
  });
  // A coordinator that takes each message (it may record it) and is too slow to answer.
  coordinator.subscribeText(subjects.steer('demo', 'slow-1'), (d) => {
    heard.push(d.value);
  });
  await coordinator.flush();
});

afterAll(async () => {
  await bus?.close();
  await coordinator?.close();
  await nats?.stop();
});

const ana: Principal = { name: 'ana', scopes: ['approve'] };
const keyOf = (message: string | undefined) => (JSON.parse(message ?? '{}') as { key?: string }).key;

/** The key a gateway tell's unanswered error tells its caller to ask again with. */
async function unanswered(told: Promise<unknown>): Promise<string> {
  const error = (await told.then(
    () => undefined,
    (e: unknown) => e,
  )) as { code?: string; message?: string } | undefined;
  expect(error).toMatchObject({
    code: 'no_coordinator',
    message: expect.stringMatching(/may still have been taken/),
  });
  const again = /with (?:idempotency )?key (\S+) and it is told once/.exec(error?.message ?? '');
  expect(again, error?.message).not.toBeNull();
  return again?.[1] ?? '';
}

describe('a tell through the gateway that its coordinator takes but does not answer in time', () => {
  it('names the idempotency key its caller gave, and a retry with it is the same tell', async () => {
    heard.length = 0;
    const actions = new GatewayActions(bus, { tellAnswerMs: 300 });
    const key = await unanswered(actions.tell(ana, 'slow-1', { text: 'use v2' }, { idempotencyKey: 'k-1' }));
    expect(key).toBe('k-1');
    await unanswered(actions.tell(ana, 'slow-1', { text: 'use v2' }, { idempotencyKey: key }));
    expect(heard).toHaveLength(2);
    expect(keyOf(heard[1])).toBe(keyOf(heard[0]));
  });

  it('names a key of its own when its caller gave none, and a retry with it is the same tell', async () => {
    heard.length = 0;
    const actions = new GatewayActions(bus, { tellAnswerMs: 300 });
    const key = await unanswered(actions.tell(ana, 'slow-1', { text: 'use v2' }));
    await unanswered(actions.tell(ana, 'slow-1', { text: 'use v2' }, { idempotencyKey: key }));
    expect(heard).toHaveLength(2);
    expect(keyOf(heard[1])).toBe(keyOf(heard[0]));
  });
});
