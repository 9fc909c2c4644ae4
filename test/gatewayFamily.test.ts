import { replyToHuman } from '@troupe/client';
import type { Gateway } from '@troupe/gateway';
import { hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  ofKind,
  startHarness,
  waitUntil,
} from './support/harness.ts';
import { openWs } from './support/ws.ts';

const TOKENS = {
  admin: 'admin-token-0123456789abcdef',
  ana: 'approver-token-0123456789abcd',
  ci: 'submit-token-0123456789abcdef',
  demoOnly: 'demo-submit-token-0123456789ab',
};

/**
 * The gateway's steering and family routes against a real coordinator: a person pauses, tells and resumes a task
 * at work, then runs an ended one again from a step, or forks it.
 */
describe('the gateway steers and remakes tasks, through a real coordinator', () => {
  let h: Harness;
  let gateway: Gateway;

  beforeAll(async () => {
    h = await startHarness([
      examplePath('demo.yaml'),
      fixturePath('slowpoke.yaml'),
      fixturePath('confirming.yaml'),
    ]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
        { name: 'ana', sha256: hashToken(TOKENS.ana), scopes: ['approve'] },
        { name: 'ci', sha256: hashToken(TOKENS.ci), scopes: ['submit'] },
        { name: 'demo-ci', sha256: hashToken(TOKENS.demoOnly), scopes: ['submit'], pipelines: ['demo'] },
      ]),
      port: 0,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  const call = async (
    method: string,
    path: string,
    token: keyof typeof TOKENS = 'admin',
    body?: unknown,
    headers: Record<string, string> = {},
  ) => {
    const response = await fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TOKENS[token]}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined, headers: response.headers };
  };

  it('tells, pauses and resumes a task at work, and refuses each once the task has ended', async () => {
    await call('POST', '/v1/pipelines/slowpoke/tasks', 'ci', { goal: 'take your time', id: 'gwf-slow-1' });
    await waitUntil(() => kinds(h.eventsOf('gwf-slow-1')).includes('llm.request'));

    const told = await call('POST', '/v1/tasks/gwf-slow-1/tell', 'ana', {
      text: 'use the v2 API',
      by: 'Ana',
    });
    expect(told).toMatchObject({
      status: 200,
      body: { taskId: 'gwf-slow-1', messageId: expect.any(String) },
    });
    await waitUntil(() => ofKind(h.eventsOf('gwf-slow-1'), 'task.told').length === 1);
    expect(ofKind(h.eventsOf('gwf-slow-1'), 'task.told')[0]?.data).toEqual({
      messageId: told.body.messageId,
      text: 'use the v2 API',
      by: 'Ana (token ana)',
    });

    expect(
      await call('POST', '/v1/tasks/gwf-slow-1/pause', 'ana', { reason: 'check the plan' }),
    ).toMatchObject({
      status: 200,
      body: { taskId: 'gwf-slow-1', status: 'paused' },
    });
    // Recorded before the answer: the task's view says so at once.
    expect((await call('GET', '/v1/tasks/gwf-slow-1')).body).toMatchObject({
      status: 'running',
      paused: { since: expect.any(String), by: 'ana', reason: 'check the plan' },
    });
    expect(await call('POST', '/v1/tasks/gwf-slow-1/pause', 'ana', {})).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict' } },
    });
    expect(await call('POST', '/v1/tasks/gwf-slow-1/resume', 'ana', {})).toMatchObject({
      status: 200,
      body: { taskId: 'gwf-slow-1', status: 'running' },
    });
    await expect.poll(async () => (await call('GET', '/v1/tasks/gwf-slow-1')).body.paused).toBeUndefined();
    expect((await call('POST', '/v1/tasks/gwf-slow-1/resume', 'ana', {})).status).toBe(409);

    await call('POST', '/v1/tasks/gwf-slow-1/cancel', 'ci', {});
    await h.finalOf('gwf-slow-1');
    for (const action of ['pause', 'resume']) {
      expect(await call('POST', `/v1/tasks/gwf-slow-1/${action}`, 'ana', {})).toMatchObject({
        status: 409,
        body: {
          error: { code: 'conflict', message: `task gwf-slow-1 already cancelled; nothing to ${action}` },
        },
      });
    }
    expect((await call('POST', '/v1/tasks/gwf-slow-1/tell', 'ana', { text: 'too late' })).status).toBe(409);
    expect((await call('POST', '/v1/tasks/no-such-task/tell', 'ana', { text: 'hi' })).status).toBe(404);
  });

  it('restarts a cancelled task from a step as a new task linked to it, with the submit scope', async () => {
    await call('POST', '/v1/pipelines/slowpoke/tasks', 'ci', { goal: 'take your time', id: 'gwf-slow-2' });
    await waitUntil(() => kinds(h.eventsOf('gwf-slow-2')).includes('llm.request'));
    expect(await call('POST', '/v1/tasks/gwf-slow-2/restart', 'ci', { from: 'plan' })).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', message: expect.stringContaining('is still running') } },
    });
    await call('POST', '/v1/tasks/gwf-slow-2/cancel', 'ci', {});
    await h.finalOf('gwf-slow-2');

    // The approve scope steers a task; it does not make one.
    expect((await call('POST', '/v1/tasks/gwf-slow-2/restart', 'ana', { from: 'plan' })).status).toBe(403);
    // A token limited to other pipelines is told no such task exists.
    expect((await call('POST', '/v1/tasks/gwf-slow-2/restart', 'demoOnly', { from: 'plan' })).status).toBe(
      404,
    );
    expect(await call('POST', '/v1/tasks/gwf-slow-2/restart', 'ci', { from: 'nowhere' })).toMatchObject({
      status: 400,
      body: { error: { code: 'invalid_request' } },
    });

    const key = { 'idempotency-key': 'restart-once' };
    const restarted = await call('POST', '/v1/tasks/gwf-slow-2/restart', 'ci', { from: 'plan' }, key);
    expect(restarted).toMatchObject({
      status: 202,
      body: { taskId: expect.any(String), origin: { taskId: 'gwf-slow-2', kind: 'restart', step: 'plan' } },
    });
    const newId: string = restarted.body.taskId;
    expect(newId).not.toBe('gwf-slow-2');
    expect(restarted.headers.get('location')).toBe(`/v1/tasks/${newId}`);
    // The same key again makes no second task.
    expect(
      (await call('POST', '/v1/tasks/gwf-slow-2/restart', 'ci', { from: 'plan' }, key)).body.taskId,
    ).toBe(newId);

    await waitUntil(() => kinds(h.eventsOf(newId)).includes('llm.request'));
    expect((await call('GET', `/v1/tasks/${newId}`)).body).toMatchObject({
      status: 'running',
      origin: { taskId: 'gwf-slow-2', kind: 'restart', step: 'plan', by: 'ci' },
    });
    await call('POST', `/v1/tasks/${newId}/cancel`, 'ci', {});
    await h.finalOf(newId);
  });

  it('forks a completed task at a step with an edited output, over HTTP and the WebSocket', async () => {
    const done = await call('POST', '/v1/pipelines/demo/tasks?wait=60', 'ci', {
      goal: 'write a hello note',
      id: 'gwf-demo-1',
    });
    expect(done.body.status).toBe('completed');
    expect(await call('POST', '/v1/tasks/gwf-demo-1/restart', 'ci', { from: 'execute' })).toMatchObject({
      status: 409,
      body: { error: { message: expect.stringContaining('fork it') } },
    });
    const forked = await call('POST', '/v1/tasks/gwf-demo-1/fork', 'demoOnly', {
      at: 'execute',
      set: { plan: 'Write hello.txt saying hi.' },
    });
    expect(forked).toMatchObject({
      status: 202,
      body: { origin: { taskId: 'gwf-demo-1', kind: 'fork', step: 'execute' } },
    });
    await h.finalOf(forked.body.taskId);
    expect((await call('GET', `/v1/tasks/${forked.body.taskId}`)).body).toMatchObject({
      status: 'completed',
      origin: {
        taskId: 'gwf-demo-1',
        kind: 'fork',
        step: 'execute',
        edited: ['steps.plan.output'],
        by: 'demo-ci',
      },
    });
    expect(
      await call('POST', '/v1/tasks/gwf-demo-1/fork', 'ci', { at: 'execute', set: { review: 'x' } }),
    ).toMatchObject({ status: 400, body: { error: { code: 'invalid_request' } } });

    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.ci}`);
    try {
      ws.send({ type: 'fork', id: 'f', taskId: 'gwf-demo-1', at: 'review', newest: true });
      const reply = await ws.next((m) => m.id === 'f');
      expect(reply).toMatchObject({
        ok: true,
        result: {
          taskId: expect.any(String),
          origin: { taskId: 'gwf-demo-1', kind: 'fork', step: 'review' },
        },
      });
      await h.finalOf(reply.result.taskId);
      expect((await call('GET', `/v1/tasks/${reply.result.taskId}`)).body.origin).toMatchObject({
        kind: 'fork',
        step: 'review',
        newest: true,
      });
      // A retry with the same key (its answer was lost) makes no second task.
      const keyed = { type: 'fork', taskId: 'gwf-demo-1', at: 'review', idempotencyKey: 'ws-fork-once' };
      ws.send({ ...keyed, id: 'k1' });
      ws.send({ ...keyed, id: 'k2' });
      const first = await ws.next((m) => m.id === 'k1');
      expect(first).toMatchObject({ ok: true, result: { taskId: expect.any(String) } });
      expect(await ws.next((m) => m.id === 'k2')).toMatchObject({
        ok: true,
        result: { taskId: first.result.taskId },
      });
      await h.finalOf(first.result.taskId);
      ws.send({ type: 'restart', id: 'r', taskId: 'gwf-demo-1', from: 'plan' });
      expect(await ws.next((m) => m.id === 'r')).toMatchObject({ ok: false, error: { code: 'conflict' } });
      ws.send({ type: 'pause', id: 'p', taskId: 'gwf-demo-1' });
      expect(await ws.next((m) => m.id === 'p')).toMatchObject({ ok: false, error: { code: 'forbidden' } });
    } finally {
      ws.close();
    }
  });

  it('restarts a cancelled task from its human step over the WebSocket: the step before it reused, the person asked again', async () => {
    await call('POST', '/v1/pipelines/confirming/tasks', 'ci', { goal: 'Release 2.0', id: 'gwf-confirm-1' });
    const questions = (taskId: string) => ofKind(h.eventsOf(taskId), 'human.asked');
    await waitUntil(() => questions('gwf-confirm-1').length === 1);
    await call('POST', '/v1/tasks/gwf-confirm-1/cancel', 'ci', {});
    await h.finalOf('gwf-confirm-1');
    const modelCalls = (taskId: string) =>
      ofKind(h.eventsOf(taskId), 'llm.request').map((e) => (e.data as { agent: string }).agent);
    expect(modelCalls('gwf-confirm-1')).toEqual(['drafter']);

    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.ci}`);
    let taskId: string;
    try {
      // Sent twice with one key (the first answer was lost): one new task.
      const restart = {
        type: 'restart',
        taskId: 'gwf-confirm-1',
        from: 'confirm',
        idempotencyKey: 'ws-restart-once',
      };
      ws.send({ ...restart, id: 'r1' });
      ws.send({ ...restart, id: 'r2' });
      const reply = await ws.next((m) => m.id === 'r1');
      expect(reply).toMatchObject({
        ok: true,
        result: {
          taskId: expect.any(String),
          origin: { taskId: 'gwf-confirm-1', kind: 'restart', step: 'confirm' },
        },
      });
      taskId = reply.result.taskId;
      expect(taskId).not.toBe('gwf-confirm-1');
      expect(await ws.next((m) => m.id === 'r2')).toMatchObject({ ok: true, result: { taskId } });
    } finally {
      ws.close();
    }

    // The person is asked again under the new task; the draft is the original's.
    await waitUntil(() => questions(taskId).length === 1);
    await replyToHuman(h.bus, questions(taskId)[0]?.data.questionId as string, {
      kind: 'question',
      answer: { answer: '{"ship": true}', by: 'ana' },
    });
    expect(await h.finalOf(taskId)).toMatchObject({
      kind: 'task.completed',
      data: { output: 'Release is shipped.' },
    });
    expect(modelCalls(taskId)).toEqual(['shipper']);
    const completed = ofKind(h.eventsOf(taskId), 'step.completed').map((e) => e.data);
    expect(completed.map((d) => [d.step, d.reused === true])).toEqual([
      ['draft', true],
      ['confirm', false],
      ['ship', false],
    ]);
    expect(questions('gwf-confirm-1')).toHaveLength(1);
    expect((await call('GET', `/v1/tasks/${taskId}`)).body).toMatchObject({
      status: 'completed',
      origin: { taskId: 'gwf-confirm-1', kind: 'restart', step: 'confirm', by: 'ci' },
    });
  });
});
