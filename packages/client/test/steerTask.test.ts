import { BUCKETS, type ControlMessage, subjects, WorkflowRecord } from '@troupe/protocol';
import { connectBus, ensureTroupeStreams, type JetStreamBus, KvStore } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancelTask, pauseTask, resumeTask, tellTask } from '../src/taskOperations.ts';

let nats: TestNats;
let bus: JetStreamBus;
let coordinator: JetStreamBus;
/** What the stand-in coordinator was sent, in order. */
const heard: ControlMessage[] = [];
/** The subjects they came on. */
const subjectsHeard: string[] = [];

/** The stand-in coordinator's answers, by action: what a real one says in each case. */
const answers: Record<string, (taskId: string, message: ControlMessage) => unknown> = {
  pause: (taskId) => ({ ok: true, taskId, outcome: 'paused' }),
  resume: (taskId) =>
    taskId === 'steer-held'
      ? { ok: true, taskId, outcome: 'resumed' }
      : {
          ok: false,
          error: { code: 'not_paused', message: `task ${taskId} is not paused; nothing was changed` },
        },
  tell: (taskId, message) =>
    message.action === 'tell' && message.text === 'one too many'
      ? {
          ok: false,
          error: {
            code: 'told_backlog',
            message: `task ${taskId} takes no more messages now; nothing was changed`,
          },
        }
      : { ok: true, taskId, outcome: 'told', messageId: 'told-1' },
  cancel: (taskId) => ({
    ok: false,
    error: {
      code: 'not_running',
      message: `task ${taskId} has not ended (it is at plan, round 1) but no coordinator runs it right now`,
    },
  }),
};

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'client', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
  coordinator = await connectBus({ servers: nats.url, name: 'coordinator', logger: captureLogger().logger });
  const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  const now = new Date().toISOString();
  const record = (taskId: string, status: WorkflowRecord['status']): WorkflowRecord => ({
    taskId,
    pipeline: 'demo',
    streamSequence: 1,
    status,
    state: 'plan',
    goal: 'g',
    round: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    createdAt: now,
    updatedAt: now,
  });
  await store.put('steer-1', record('steer-1', 'running'));
  await store.put('steer-held', record('steer-held', 'running'));
  await store.put('steer-done', record('steer-done', 'completed'));
  // Cancel and migrate go on the task's control subject; pause, resume and tell on its pipeline's steering one.
  for (const subject of [subjects.allControl, subjects.allSteer]) {
    coordinator.subscribeText(subject, (delivery) => {
      const message = JSON.parse(delivery.value) as ControlMessage;
      heard.push(message);
      subjectsHeard.push(delivery.subject);
      const taskId = delivery.subject.slice(delivery.subject.lastIndexOf('.') + 1);
      delivery.respond(answers[message.action]?.(taskId, message));
    });
  }
  await coordinator.flush();
});

afterAll(async () => {
  await bus?.close();
  await coordinator?.close();
  await nats?.stop();
});

describe('pause, resume and tell, through the coordinator running the task', () => {
  it('send the control message with who and why, and take the receipt', async () => {
    heard.length = 0;
    subjectsHeard.length = 0;
    await pauseTask(bus, 'steer-1', { reason: 'wrong API', by: 'ana' });
    await resumeTask(bus, 'steer-held', { by: 'ana' });
    await expect(tellTask(bus, 'steer-1', 'use the v2 API', { by: 'ana', key: 'k-1' })).resolves.toEqual({
      messageId: 'told-1',
      key: 'k-1',
    });
    // With no key given, the tell makes one of its own and says it.
    const { key } = await tellTask(bus, 'steer-1', 'and log it');
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(heard).toEqual([
      { action: 'pause', reason: 'wrong API', by: 'ana' },
      { action: 'resume', by: 'ana' },
      { action: 'tell', text: 'use the v2 API', by: 'ana', key: 'k-1' },
      { action: 'tell', text: 'and log it', key },
    ]);
    // On the pipeline's steering subject, which NATS permissions can grant for some pipelines only.
    expect(subjectsHeard).toEqual([
      'troupe.steer.demo.steer-1',
      'troupe.steer.demo.steer-held',
      'troupe.steer.demo.steer-1',
      'troupe.steer.demo.steer-1',
    ]);
  });

  it("are a conflict with the coordinator's reason when it refuses", async () => {
    await expect(resumeTask(bus, 'steer-1')).rejects.toMatchObject({
      name: 'OperationError',
      code: 'conflict',
      message: 'task steer-1 is not paused; nothing was changed',
    });
    await expect(tellTask(bus, 'steer-1', 'one too many')).rejects.toMatchObject({
      code: 'conflict',
      message: 'task steer-1 takes no more messages now; nothing was changed',
    });
  });

  it('are refused without asking anyone for a task ended or unknown, or an empty message', async () => {
    heard.length = 0;
    await expect(pauseTask(bus, 'steer-done')).rejects.toMatchObject({
      code: 'conflict',
      message: 'task steer-done already completed; nothing to pause',
    });
    await expect(tellTask(bus, 'nobody-1', 'hello')).rejects.toMatchObject({
      code: 'not_found',
      message: 'no task nobody-1 is known on this server',
    });
    await expect(tellTask(bus, 'steer-1', '   ')).rejects.toMatchObject({
      code: 'invalid_request',
      message: 'cannot tell task steer-1: text: must not be empty',
    });
    expect(heard).toEqual([]);
  });

  it('say a task nobody runs right now is unavailable, not a conflict', async () => {
    await expect(cancelTask(bus, 'steer-1')).rejects.toMatchObject({
      code: 'unavailable',
      message: expect.stringContaining('no coordinator runs it right now'),
    });
  });
});
