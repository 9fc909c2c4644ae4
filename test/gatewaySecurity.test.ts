import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { STREAMS, subjects } from '@troupe/protocol';
import { createLogger, jetstreamManagerOf } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';
import { readSse, type SseMessage } from './support/sse.ts';
import { openWs } from './support/ws.ts';

/** One token per test where a test spends a token's caps or revokes it, so the tests do not meet each other's. */
const TOKENS = {
  admin: 'sec-admin-token-0123456789abcdef',
  demoOnly: 'sec-demo-token-0123456789abcdef',
  rival: 'sec-rival-token-0123456789abcdef',
  capped: 'sec-capped-token-0123456789abcde',
  wsCapped: 'sec-wscapped-token-0123456789abc',
  doomed: 'sec-doomed-token-0123456789abcde',
};
const ENTRIES = {
  admin: { name: 'ops', scopes: ['admin'] },
  demoOnly: { name: 'ci', scopes: ['submit'], pipelines: ['demo'] },
  rival: { name: 'rival', scopes: ['submit'], pipelines: ['demo'] },
  capped: { name: 'capped', scopes: ['read'] },
  wsCapped: { name: 'wscapped', scopes: ['read'] },
  doomed: { name: 'doomed', scopes: ['read'] },
} as const;
type Who = keyof typeof TOKENS;

const SECRET = 'a-secret-every-gateway-of-this-deployment-shares';
const CAPS = { streams: 3, consumers: 4 };

/** A tokens file holding the entries of `who`. */
const tokensYaml = (who: readonly Who[]) =>
  JSON.stringify({ tokens: who.map((w) => ({ ...ENTRIES[w], sha256: hashToken(TOKENS[w]) })) });

describe('the gateway under attack', () => {
  let h: Harness;
  let gateway: Gateway;
  let dir: string;
  let tokensFile: string;
  const logLines: string[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-gateway-sec-'));
    tokensFile = join(dir, 'tokens.json');
    await writeFile(tokensFile, tokensYaml(Object.keys(TOKENS) as Who[]));
    h = await startHarness([examplePath('demo.yaml'), fixturePath('gated.yaml')]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({
        level: 'info',
        destination: { write: (line: string) => void logLines.push(line) },
      }),
      tokens: await TokenStore.load(tokensFile, {}),
      port: 0,
      idSecret: SECRET,
      streamCaps: CAPS,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const call = async (
    method: string,
    path: string,
    options: { token?: Who; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
  ) => {
    const response = await fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TOKENS[options.token ?? 'admin']}`,
        ...(options.body === undefined && options.raw === undefined
          ? {}
          : { 'content-type': 'application/json' }),
        ...options.headers,
      },
      ...(options.raw !== undefined
        ? { body: options.raw }
        : options.body === undefined
          ? {}
          : { body: JSON.stringify(options.body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  const wsUrl = (who: Who) => `${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS[who]}`;
  const lastTaskSeq = async () =>
    (await (await jetstreamManagerOf(h.bus)).streams.info(STREAMS.tasks)).state.last_seq;

  it('refuses a client’s parent on every route that submits: only a pipeline step sets it', async () => {
    // A task of a pipeline the token may not touch, whose existence and end the parent would have given away.
    const other = await call('POST', '/v1/pipelines/gated/tasks', {
      body: { goal: 'release v9', id: 'sec-b-1' },
    });
    expect(other.status).toBe(202);
    const parent = { taskId: 'sec-b-1', pipeline: 'gated', step: 'work', depth: 1 };
    const before = await lastTaskSeq();

    const http = await call('POST', '/v1/pipelines/demo/tasks', {
      token: 'demoOnly',
      body: { goal: 'probe', id: 'sec-probe-1', parent },
    });
    expect(http.status).toBe(400);
    expect(http.body.error).toMatchObject({ code: 'invalid_request' });
    expect(http.body.error.message).toContain('parent: set by a pipeline step, never by a client');

    const ws = await openWs(wsUrl('demoOnly'));
    try {
      ws.send({ type: 'submit', id: 'p1', pipeline: 'demo', task: { goal: 'probe', parent } });
      const refused = await ws.next((m) => m.type === 'error' || m.id === 'p1');
      expect(JSON.stringify(refused)).toContain('parent: set by a pipeline step, never by a client');
    } finally {
      ws.close();
    }

    const session = await call('POST', '/v1/sessions', { token: 'demoOnly', body: { pipeline: 'demo' } });
    expect(session.status).toBe(201);
    const said = await call('POST', `/v1/sessions/${session.body.id}/messages`, {
      token: 'demoOnly',
      body: { goal: 'probe', parent },
    });
    expect(said.status).toBe(400);
    expect(said.body.error.message).toContain('parent: set by a pipeline step, never by a client');
    // Nothing reached the TASKS stream.
    expect(await lastTaskSeq()).toBe(before);
  });

  it('gives a token nothing of another pipeline’s task whose id it submits again while that task is queued', async () => {
    // Pipeline outline's task, stored while no coordinator serves outline: queued, with no record yet.
    const js = jetstream(h.client);
    await js.publish(subjects.task('outline'), JSON.stringify({ id: 'sec-queued-1', goal: 'secret work' }), {
      msgID: 'sec-queued-1',
    });
    // A demo-only token submits the same id and waits: TASKS drops it as a duplicate, so no record tells whose it is.
    const probe = call('POST', '/v1/pipelines/demo/tasks?wait=5', {
      token: 'demoOnly',
      body: { goal: 'probe', id: 'sec-queued-1' },
    });
    // The queued task ends meanwhile, on a coordinator that serves outline from now on.
    const outline = await startSecondCoordinator(h, ['outline.yaml']);
    try {
      const answer = await probe;
      expect(answer.status).toBe(202);
      expect(answer.body).toMatchObject({ taskId: 'sec-queued-1', pipeline: 'demo', duplicate: true });
      expect(answer.body.status).toBe('submitted');
      expect(JSON.stringify(answer.body)).not.toContain('outline');
      expect(answer.body.output).toBeUndefined();
      // And asked afterwards, the task is not the token's to see.
      expect((await call('GET', '/v1/tasks/sec-queued-1', { token: 'demoOnly' })).status).toBe(404);
    } finally {
      await outline.stop();
    }
  });

  it('refuses at the edge, with 413 or 400 and the reason, a task the coordinators would refuse; deep JSON does not crash it', async () => {
    const before = await lastTaskSeq();
    // Large apart from its input (which would be stored, and referred to): 300 labels of 1,000 bytes.
    const labels = Object.fromEntries(
      Array.from({ length: 300 }, (_, i) => [`label${i}`, 'x'.repeat(1_000)]),
    );
    const large = await call('POST', '/v1/pipelines/demo/tasks', { body: { goal: 'big', metadata: labels } });
    expect(large.status).toBe(413);
    expect(large.body.error).toMatchObject({ code: 'too_large' });
    expect(large.body.error.message).toMatch(/the task is \d+ bytes; the limit is 262144/);

    const nest = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
    // 64 levels in all: the task, `input`, and 62 below it; one more is refused.
    const fits = await call('POST', '/v1/pipelines/demo/tasks', {
      raw: `{"goal":"deep","input":${nest(63)}}`,
    });
    expect(fits.status).toBe(202);
    const deep = await call('POST', '/v1/pipelines/demo/tasks', {
      raw: `{"goal":"deep","input":${nest(64)}}`,
    });
    expect(deep.status).toBe(400);
    expect(deep.body.error.message).toContain('more than 64 levels deep');

    const timings: Record<number, number> = {};
    for (const levels of [10_000, 100_000]) {
      const started = performance.now();
      const answer = await call('POST', '/v1/pipelines/demo/tasks', {
        raw: `{"goal":"deep","input":{"a":${'['.repeat(levels)}${']'.repeat(levels)}}}`,
      });
      timings[levels] = Math.round(performance.now() - started);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ code: 'invalid_request' });
      expect(answer.body.error.message).toContain('levels deep');
    }
    // Over a WebSocket, the same limits with the same answer.
    const ws = await openWs(wsUrl('admin'));
    try {
      ws.send({
        type: 'submit',
        id: 'big',
        pipeline: 'demo',
        task: { goal: 'big', metadata: labels },
      });
      expect(await ws.next((m) => m.id === 'big')).toMatchObject({ ok: false, error: { code: 'too_large' } });
      ws.sendRaw(
        `{"type":"submit","id":"deep","pipeline":"demo","task":{"goal":"g","input":${nest(100_000)}}}`,
      );
      expect(await ws.next((m) => m.type === 'error')).toMatchObject({ error: { code: 'invalid_message' } });
      ws.send({
        type: 'submit',
        id: 'deep-64',
        pipeline: 'demo',
        task: { goal: 'g', input: JSON.parse(nest(64)) },
      });
      const deepReply = await ws.next((m) => m.id === 'deep-64');
      expect(deepReply).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
      expect(deepReply.error.message).toContain('more than 64 levels deep');
    } finally {
      ws.close();
    }
    // A session's message too: refused, and the turn given back, so the session takes the next one.
    const session = await call('POST', '/v1/sessions', { body: { pipeline: 'demo' } });
    const tooBig = await call('POST', `/v1/sessions/${session.body.id}/messages`, {
      body: { goal: 'big', metadata: labels },
    });
    expect(tooBig).toMatchObject({ status: 413, body: { error: { code: 'too_large' } } });
    expect((await call('GET', `/v1/sessions/${session.body.id}`)).body.turns).toEqual([]);
    const next = await call('POST', `/v1/sessions/${session.body.id}/messages`, { body: { goal: 'small' } });
    expect(next.status).toBe(202);
    // Only the tasks that fit were stored; the gateway serves on, and logged no failure.
    expect(await lastTaskSeq()).toBe(before + 2);
    expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200);
    expect(logLines.filter((l) => l.includes('request failed'))).toEqual([]);
    expect(timings[100_000]).toBeLessThan(5_000);
  });

  it('makes an idempotency key’s task id with the shared secret: no other token can compute it and take it first', async () => {
    const key = 'order-42';
    // What the id was before: a hash of the token's name and the key, which anyone can compute.
    const guessable = `k-${createHash('sha256').update(`ci\n${key}`).digest('base64url').slice(0, 32)}`;
    const squat = await call('POST', '/v1/pipelines/demo/tasks', {
      token: 'rival',
      body: { goal: 'squat', id: guessable },
    });
    expect(squat.status).toBe(202);

    const keyed = {
      token: 'demoOnly' as const,
      body: { goal: 'the owner’s task' },
      headers: { 'idempotency-key': key },
    };
    const first = await call('POST', '/v1/pipelines/demo/tasks', keyed);
    expect(first.status).toBe(202);
    expect(first.body.duplicate).toBeUndefined();
    expect(first.body.taskId).toMatch(/^k-[A-Za-z0-9_-]{32}$/);
    expect(first.body.taskId).not.toBe(guessable);
    // The same token and key are the same task, on this gateway and on another with the same secret.
    const again = await call('POST', '/v1/pipelines/demo/tasks', keyed);
    expect(again.body).toMatchObject({ taskId: first.body.taskId, duplicate: true });
    const twin = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: await TokenStore.load(tokensFile, {}),
      port: 0,
      idSecret: SECRET,
    });
    try {
      const there = await fetch(`${twin.url}/v1/pipelines/demo/tasks`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKENS.demoOnly}`,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: JSON.stringify({ goal: 'the owner’s task' }),
      });
      expect(await there.json()).toMatchObject({ taskId: first.body.taskId, duplicate: true });
    } finally {
      await twin.close();
    }
    // Another token's same key is another task.
    const rivals = await call('POST', '/v1/pipelines/demo/tasks', { ...keyed, token: 'rival' });
    expect(rivals.body.taskId).not.toBe(first.body.taskId);
  });

  it('caps a token’s open streams and the consumers they hold, and frees a slot when a stream closes', async () => {
    const jsm = await jetstreamManagerOf(h.bus);
    const consumers = async () => (await jsm.streams.info(STREAMS.events)).state.consumer_count;
    const baseline = await consumers();
    const open = async (who: Who) => {
      const controller = new AbortController();
      const response = await fetch(`${gateway.url}/v1/events`, {
        headers: { authorization: `Bearer ${TOKENS[who]}` },
        signal: controller.signal,
      });
      return { response, close: () => controller.abort() };
    };
    const streams = [await open('capped'), await open('capped'), await open('capped')];
    expect(streams.map((s) => s.response.status)).toEqual([200, 200, 200]);
    await expect.poll(consumers).toBe(baseline + 3);
    const over = await open('capped');
    expect(over.response.status).toBe(429);
    const refusal = (await over.response.json()) as { error: { code: string; message: string } };
    expect(refusal.error.code).toBe('too_many_streams');
    expect(refusal.error.message).toContain('token capped has 3 event streams and WebSockets open');
    expect(logLines.some((l) => l.includes('refused GET /v1/events: token capped has 3'))).toBe(true);
    // A WebSocket counts as a stream: refused before the upgrade.
    await expect(openWs(wsUrl('capped'))).rejects.toThrow(/429/);
    // Another token is not held back by this one.
    const others = await open('wsCapped');
    expect(others.response.status).toBe(200);
    others.close();
    // A stream closed gives its slot and its consumer back.
    streams[0]?.close();
    await expect.poll(consumers).toBe(baseline + 2);
    await expect
      .poll(async () => {
        const next = await open('capped');
        next.close();
        return next.response.status;
      })
      .toBe(200);
    for (const s of streams) s.close();
    await expect.poll(consumers).toBe(baseline);
  });

  it('caps the tasks a token’s WebSockets follow, across its connections', async () => {
    const jsm = await jetstreamManagerOf(h.bus);
    const consumers = async () => (await jsm.streams.info(STREAMS.events)).state.consumer_count;
    const baseline = await consumers();
    // Tasks that wait for a person: following one holds its consumer until it ends.
    const ids = ['sec-held-1', 'sec-held-2', 'sec-held-3', 'sec-held-4', 'sec-held-5'];
    for (const id of ids) {
      expect(
        (await call('POST', '/v1/pipelines/gated/tasks', { body: { goal: 'release v4', id } })).status,
      ).toBe(202);
    }
    await expect
      .poll(async () =>
        (await Promise.all(ids.map((id) => call('GET', `/v1/tasks/${id}`)))).every((r) => r.status === 200),
      )
      .toBe(true);
    const one = await openWs(wsUrl('wsCapped'));
    const two = await openWs(wsUrl('wsCapped'));
    try {
      for (const [i, id] of ids.slice(0, 2).entries()) {
        one.send({ type: 'subscribe', id: `a${i}`, taskId: id });
        expect(await one.next((m) => m.id === `a${i}`)).toMatchObject({ ok: true });
      }
      for (const [i, id] of ids.slice(2, 4).entries()) {
        two.send({ type: 'subscribe', id: `b${i}`, taskId: id });
        expect(await two.next((m) => m.id === `b${i}`)).toMatchObject({ ok: true });
      }
      two.send({ type: 'subscribe', id: 'b-over', taskId: 'sec-held-5' });
      const over = await two.next((m) => m.id === 'b-over');
      expect(over).toMatchObject({ ok: false, error: { code: 'too_many_consumers' } });
      expect(over.error.message).toContain('token wscapped has 4 NATS consumers held');
      await expect.poll(consumers).toBe(baseline + 4);
      // A connection closed frees what it followed.
      one.close();
      await expect.poll(consumers).toBe(baseline + 2);
      two.send({ type: 'subscribe', id: 'b-again', taskId: 'sec-held-5' });
      expect(await two.next((m) => m.id === 'b-again')).toMatchObject({ ok: true });
    } finally {
      one.close();
      two.close();
    }
    await expect.poll(consumers).toBe(baseline);
    for (const id of ids) await call('POST', `/v1/tasks/${id}/cancel`, { body: {} });
  });

  it('stops a revoked token within the reload bound, and ends the streams it holds open', async () => {
    expect((await call('GET', '/v1/tasks', { token: 'doomed' })).status).toBe(200);
    const messages: SseMessage[] = [];
    const sse = readSse(`${gateway.url}/v1/events`, {
      headers: { authorization: `Bearer ${TOKENS.doomed}` },
      onMessage: (m) => void messages.push(m),
    });
    await expect.poll(() => messages.some((m) => m.event === 'ready')).toBe(true);
    const ws = await openWs(wsUrl('doomed'));
    const revokedAt = Date.now();
    await writeFile(tokensFile, tokensYaml((Object.keys(TOKENS) as Who[]).filter((w) => w !== 'doomed')));

    await expect
      .poll(async () => (await call('GET', '/v1/tasks', { token: 'doomed' })).status, { timeout: 5_000 })
      .toBe(401);
    const ended = await sse;
    expect(ended.ended).toBe(true);
    expect(ended.messages.at(-1)).toMatchObject({ event: 'error' });
    expect(JSON.parse(ended.messages.at(-1)?.data ?? '{}')).toMatchObject({ code: 'unauthenticated' });
    const closed = await ws.closed;
    expect(closed.code).toBe(1008);
    expect(closed.reason).toContain('token doomed was revoked');
    // Documented bound: 2 seconds (a changed file is seen at once, or at the next 1-second read).
    expect(Date.now() - revokedAt).toBeLessThan(2_000);
    // The other tokens work on.
    expect((await call('GET', '/v1/tasks', { token: 'admin' })).status).toBe(200);
  });

  it('refuses a WebSocket from a page whose name rebinds to the gateway, and takes one from its own loopback origin', async () => {
    const port = new URL(gateway.url).port;
    const base = `${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.admin}`;
    // A DNS-rebound page: its name is both the Origin and the Host the browser sends.
    await expect(
      openWs(base, {
        origin: `http://rebind.attacker.example:${port}`,
        headers: { host: `rebind.attacker.example:${port}` },
      }),
    ).rejects.toThrow(/403/);
    const own = await openWs(base, { origin: `http://127.0.0.1:${port}` });
    own.close();
    const status = await new Promise<number>((resolve, reject) => {
      const url = new URL(`${gateway.url}/v1/ws?access_token=${TOKENS.admin}`);
      httpRequest({
        hostname: url.hostname,
        port: url.port,
        path: `${url.pathname}${url.search}`,
        headers: {
          host: `rebind.attacker.example:${port}`,
          origin: `http://rebind.attacker.example:${port}`,
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      })
        .on('response', (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('upgrade', () => resolve(101))
        .on('error', reject)
        .end();
    });
    expect(status).toBe(403);
    expect(logLines.some((l) => l.includes('does not know the name rebind.attacker.example'))).toBe(true);
  });
});
