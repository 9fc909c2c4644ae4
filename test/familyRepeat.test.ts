import { cancelTask, forkTask, OperationError, restartTask } from '@troupe/client';
import type { Gateway } from '@troupe/gateway';
import { hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { subjects } from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  ofKind,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

const TOKEN = 'submit-token-0123456789abcdef';
/** A provider key: every event shows it as `[redacted]`. */
const KEY = 'sk-proj-0123456789abcdefABCDEF';
const INPUT = { ticket: 'T-7', apiKey: KEY };

/**
 * A restart or fork runs with what its origin really ran with, not the redacted copy its events show; and an
 * idempotency key (a task id given again) answers only the same restart or fork, refusing one with other arguments.
 */
describe('restart and fork, asked again or of a task given a secret', () => {
  let h: Harness;
  let gateway: Gateway;
  /** The planner's step requests of slowpoke, as a host is sent them: their task id and input. */
  const sent: { taskId: string; input?: Record<string, unknown> }[] = [];

  beforeAll(async () => {
    // Every step over NATS (maxLocalSteps 0): the planner's step requests are read as a plain subscriber sees them,
    // and a step run in-process is no message.
    h = await startHarness([examplePath('demo.yaml'), fixturePath('slowpoke.yaml')], { maxLocalSteps: 0 });
    const sub = h.client.subscribe(subjects.agent('slowpoke', 'planner'));
    void (async () => {
      for await (const message of sub) {
        const request = message.json<{ taskId?: string; input?: Record<string, unknown> }>();
        if (request.taskId)
          sent.push({ taskId: request.taskId, ...(request.input ? { input: request.input } : {}) });
      }
    })();
    await h.client.flush();
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([{ name: 'ci', sha256: hashToken(TOKEN), scopes: ['submit'] }]),
      port: 0,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  const call = async (path: string, body: unknown, key?: string) => {
    const response = await fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TOKEN}`,
        'content-type': 'application/json',
        ...(key ? { 'idempotency-key': key } : {}),
      },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  };
  /** Starts a slowpoke task with {@link INPUT}, and cancels it once its planner is at work. */
  const cancelledWithSecret = async (id: string) => {
    publishTask(h, 'slowpoke', { id, goal: 'take your time', input: INPUT });
    await waitUntil(() => kinds(h.eventsOf(id)).includes('llm.request'));
    await cancelTask(h.bus, id);
    await h.finalOf(id);
  };
  const stop = async (taskId: string) => {
    await waitUntil(() => kinds(h.eventsOf(taskId)).includes('llm.request'));
    await cancelTask(h.bus, taskId);
    await h.finalOf(taskId);
  };

  it('restarts a task given an sk- key with the real key, and the claim takes a raw restart carrying it', async () => {
    await cancelledWithSecret('fr-secret-1');
    const accepted = ofKind(h.eventsOf('fr-secret-1'), 'task.accepted')[0];
    expect(accepted?.data.input).toEqual({ ticket: 'T-7', apiKey: '[redacted]' });

    const { taskId } = await restartTask(h.bus, 'fr-secret-1', { from: 'plan' });
    await waitUntil(() => sent.some((s) => s.taskId === taskId));
    expect(sent.find((s) => s.taskId === taskId)?.input).toEqual(INPUT);
    await stop(taskId);

    // As any NATS client may publish it: the real input is no change from the original's.
    publishTask(h, 'slowpoke', {
      id: 'fr-secret-raw',
      goal: 'take your time',
      input: INPUT,
      origin: { taskId: 'fr-secret-1', kind: 'restart', step: 'plan' },
    });
    await waitUntil(() =>
      kinds(h.eventsOf('fr-secret-raw')).some((k) => k === 'llm.request' || k === 'task.failed'),
    );
    expect(kinds(h.eventsOf('fr-secret-raw'))).not.toContain('task.failed');
    expect(sent.find((s) => s.taskId === 'fr-secret-raw')?.input).toEqual(INPUT);
    await stop('fr-secret-raw');
  });

  it('answers a restart asked again with its key, and refuses the key for another restart or a fork', async () => {
    await cancelledWithSecret('fr-key-1');
    const first = await restartTask(h.bus, 'fr-key-1', { from: 'plan', id: 'fr-key-restart' });
    expect(first.taskId).toBe('fr-key-restart');
    expect((await restartTask(h.bus, 'fr-key-1', { from: 'plan', id: 'fr-key-restart' })).taskId).toBe(
      'fr-key-restart',
    );
    const refused = await forkTask(h.bus, 'fr-key-1', { at: 'plan', id: 'fr-key-restart' }).catch((e) => e);
    expect(refused).toBeInstanceOf(OperationError);
    expect(refused).toMatchObject({
      code: 'conflict',
      message: expect.stringContaining(
        'it was used for a restart of task fr-key-1 from step plan; use another key',
      ),
    });
    await stop('fr-key-restart');
  });

  it('over the gateway, a fork retried with its key gets its task, and the key with another step or edit is a 409', async () => {
    const done = await call('/v1/pipelines/demo/tasks?wait=60', {
      goal: 'write a hello note',
      id: 'fr-demo-1',
    });
    expect(done.body.status).toBe('completed');
    const fork = { at: 'execute', set: { plan: 'Write hello.txt saying hi.' } };
    const made = await call('/v1/tasks/fr-demo-1/fork', fork, 'fork-once');
    expect(made).toMatchObject({ status: 202, body: { origin: { kind: 'fork', step: 'execute' } } });
    // Asked again at once (its mark, or its record if claimed by then) and once it ran (its record): the same task.
    expect((await call('/v1/tasks/fr-demo-1/fork', fork, 'fork-once')).body.taskId).toBe(made.body.taskId);
    expect((await call('/v1/tasks/fr-demo-1/fork', { ...fork, at: 'review' }, 'fork-once')).status).toBe(409);
    await h.finalOf(made.body.taskId);
    expect((await call('/v1/tasks/fr-demo-1/fork', fork, 'fork-once')).body.taskId).toBe(made.body.taskId);

    for (const other of [
      { ...fork, at: 'review' },
      { ...fork, set: { plan: 'Write bye.txt.' } },
      { at: 'execute' },
      { ...fork, input: { note: 'x' } },
    ]) {
      expect(await call('/v1/tasks/fr-demo-1/fork', other, 'fork-once')).toMatchObject({
        status: 409,
        body: {
          error: {
            code: 'conflict',
            message: expect.stringContaining(
              'it was used for a fork of task fr-demo-1 from step execute with other edits',
            ),
          },
        },
      });
    }
  });
});
