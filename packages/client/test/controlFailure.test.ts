import { BUCKETS, type ErrorReply, subjects, WorkflowRecord } from '@troupe/protocol';
import { type JetStreamBus, KvStore } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cancelTask, tellTask } from '../src/taskOperations.ts';

let nats: TestNats;
let bus: JetStreamBus;
let coordinator: JetStreamBus;

beforeAll(async () => {
  nats = await startTestNats();
  // A second copy of the runtime, loaded apart from the one the client imports: as `troupe up --gateway` hands the
  // bus its own CLI bundle made to the gateway's bundle, whose client has copies of the runtime's classes of its own.
  vi.resetModules();
  const otherBundle: typeof import('@troupe/runtime/bus') = await import('@troupe/runtime/bus');
  bus = await otherBundle.connectBus({
    servers: nats.url,
    name: 'up-bundle',
    logger: captureLogger().logger,
  });
  await otherBundle.ensureTroupeStreams(bus);
  coordinator = await otherBundle.connectBus({
    servers: nats.url,
    name: 'coordinator',
    logger: captureLogger().logger,
  });
});

afterAll(async () => {
  await bus?.close();
  await coordinator?.close();
  await nats?.stop();
});

describe("a cancel the coordinator refuses, through a bus another bundle's runtime made", () => {
  it("is a conflict with the coordinator's reason, not unavailable", async () => {
    const now = new Date().toISOString();
    const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
    await store.put('ended-1', {
      taskId: 'ended-1',
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
    // The record still says running; the coordinator has seen the task end since.
    const refusal: ErrorReply = {
      ok: false,
      error: {
        code: 'task_ended',
        message: 'task ended-1 has already ended: completed; nothing was changed',
      },
    };
    const served = coordinator.subscribeText(subjects.control('ended-1'), (d) => d.respond(refusal));
    await coordinator.flush();
    try {
      await expect(cancelTask(bus, 'ended-1')).rejects.toMatchObject({
        name: 'OperationError',
        code: 'conflict',
        message: 'task ended-1 has already ended: completed; nothing was changed',
      });
    } finally {
      served.unsubscribe();
    }
  });
});

describe('a steering message its coordinator takes but does not answer in time', () => {
  it('says it may have been taken, not that no coordinator runs', async () => {
    const now = new Date().toISOString();
    const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
    await store.put('slow-1', {
      taskId: 'slow-1',
      pipeline: 'demo',
      streamSequence: 2,
      status: 'running',
      state: 'plan',
      goal: 'g',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: now,
      updatedAt: now,
    });
    // A coordinator that takes the message (it may record it) and is too slow to answer.
    const heard: string[] = [];
    const served = coordinator.subscribeText(subjects.steer('demo', 'slow-1'), (d) => {
      heard.push(d.value);
    });
    await coordinator.flush();
    try {
      // The answer's wait is short here (10 s by default): what is checked is what a tell not answered in time says.
      const told = tellTask(bus, 'slow-1', 'use v2', { timeoutMs: 500 });
      await expect(told).rejects.toMatchObject({ name: 'OperationError', code: 'no_coordinator' });
      const error = await told.catch((e: Error) => e);
      expect(heard).toHaveLength(1);
      expect((error as Error).message).toMatch(/may still have been taken/);
      expect((error as Error).message).not.toMatch(/none is running/);
      // The tell went with a key of its own, which the error says, so a retry with it is told once.
      const { key } = JSON.parse(heard[0] ?? '{}') as { key?: string };
      expect(key).toMatch(/^[0-9a-f-]{36}$/);
      expect((error as Error).message).toContain(`tell it again with key ${key} and it is told once`);
      // The retry sends the key it is given.
      await expect(
        tellTask(bus, 'slow-1', 'use v2', { key: key ?? '', timeoutMs: 500 }),
      ).rejects.toMatchObject({
        code: 'no_coordinator',
      });
      expect(heard.map((h) => (JSON.parse(h) as { key?: string }).key)).toEqual([key, key]);
    } finally {
      served.unsubscribe();
    }
  });
});
