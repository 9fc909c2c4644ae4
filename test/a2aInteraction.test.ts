import { Role, type StreamResponse, TaskState } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { RequestMalformedError, TaskNotFoundError } from '@a2a-js/sdk/errors';
import { startGateway, TokenStore } from '@troupe/gateway';
import { STREAMS } from '@troupe/protocol';
import { createLogger, jetstreamManagerOf } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type A2aEnv,
  a2aClient,
  asTask,
  BINDINGS,
  data,
  describeUpdate,
  raw,
  send,
  startA2aEnv,
  startA2aGateway,
  stateName,
  text,
} from './support/a2aServer.ts';
import { startSecondCoordinator } from './support/harness.ts';

/** What an INPUT_REQUIRED status asks, from its data part. */
function askedOf(status: {
  message?: { parts: { content?: { $case: string; value: unknown } }[] } | undefined;
}) {
  const part = status.message?.parts.find((p) => p.content?.$case === 'data');
  return (part?.content?.value as { requests: Record<string, unknown>[] } | undefined)?.requests ?? [];
}

describe('the A2A server: people, contexts, dropped streams and scoped tokens', () => {
  let env: A2aEnv;

  beforeAll(async () => {
    env = await startA2aEnv();
  });
  afterAll(async () => {
    await env?.stop();
  });

  describe.each(BINDINGS)('over %s', (binding) => {
    it('asks for an approval as INPUT_REQUIRED; the next message on the task answers it and the task completes', async () => {
      const client = await a2aClient(env, 'gated', binding);
      const waiting = asTask(await client.sendMessage(send([text('ship the release')])));
      expect(stateName(waiting.status?.state)).toBe('INPUT_REQUIRED');
      const [asked] = askedOf(waiting.status as never);
      expect(asked).toMatchObject({
        kind: 'approval',
        agent: 'executor',
        tool: 'write_file',
        answerSchema: { properties: { decision: { enum: ['approve', 'deny'] } }, required: ['decision'] },
      });
      expect(waiting.status?.message?.parts[0]?.content).toMatchObject({
        $case: 'text',
        value: expect.stringMatching(/write_file.*approve, or deny with a reason/),
      });
      // A deny needs its reason: refused, and the approval still waits.
      const bare = await client
        .sendMessage(send([text('deny')], { taskId: waiting.id, contextId: waiting.contextId }))
        .catch((e: unknown) => e);
      expect(bare).toBeInstanceOf(RequestMalformedError);
      const done = asTask(
        await client.sendMessage(
          send([data({ decision: 'approve', reason: 'release approved' })], {
            taskId: waiting.id,
            contextId: waiting.contextId,
          }),
        ),
      );
      expect(stateName(done.status?.state)).toBe('COMPLETED');
      expect(done.id).toBe(waiting.id);
      const decided = env.h.eventsOf(waiting.id).find((e) => e.kind === 'approval.decided');
      expect(decided?.data).toMatchObject({ decision: 'allow', reason: 'release approved', by: 'ops' });
      // The conversation: the goal, the question, the answer.
      expect(done.history.map((m) => m.role)).toEqual([1, 2, 1]);
    });

    it('asks a human step’s question; a data part answers it, and the flow goes on with that answer', async () => {
      const client = await a2aClient(env, 'confirming', binding);
      const updates: string[] = [];
      let taskId = '';
      let contextId = '';
      let last: StreamResponse | undefined;
      for await (const update of client.sendMessageStream(send([text('release 2.0')]))) {
        updates.push(describeUpdate(update));
        last = update;
        if (update.payload?.$case === 'task') ({ id: taskId, contextId } = update.payload.value);
      }
      // A stream ends when its task asks for input: what, and the JSON Schema the step declares for the answer.
      expect(updates.at(-1)).toBe('status:INPUT_REQUIRED Ship the draft?');
      const status = last?.payload?.$case === 'statusUpdate' ? last.payload.value.status : undefined;
      expect(askedOf(status as never)).toEqual([
        expect.objectContaining({
          kind: 'question',
          prompt: 'Ship the draft?',
          answerSchema: { type: 'object', properties: { ship: { type: 'boolean' } }, required: ['ship'] },
        }),
      ]);
      const done = asTask(
        await client.sendMessage(send([data({ answer: { ship: true } })], { taskId, contextId })),
      );
      expect(stateName(done.status?.state)).toBe('COMPLETED');
      expect(
        env.h.eventsOf(taskId).some((e) => e.kind === 'step.started' && e.data.agent === 'shipper'),
      ).toBe(true);
    });

    it('runs a follow-up in the same context as a task that sees the conversation so far', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const first = asTask(await client.sendMessage(send([text('a haiku about rain')])));
      const second = asTask(
        await client.sendMessage(send([text('now one about snow')], { contextId: first.contextId })),
      );
      expect(second.contextId).toBe(first.contextId);
      expect(second.id).not.toBe(first.id);
      const accepted = env.h.eventsOf(second.id).find((e) => e.kind === 'task.accepted');
      expect(accepted?.data).toMatchObject({
        input: {
          session: { id: first.contextId, earlier: [{ taskId: first.id, goal: 'a haiku about rain' }] },
        },
      });
      // The earlier turns the task was given are not shown back as the client's message.
      const read = await client.getTask({ id: second.id, tenant: '' });
      expect(read.history[0]?.parts.map((p) => p.content)).toEqual([
        { $case: 'text', value: 'now one about snow' },
      ]);
      // A context the client names is kept; one of another pipeline is refused.
      const named = asTask(
        await client.sendMessage(send([text('mine')], { contextId: `chat-${binding.length}-a` })),
      );
      expect(named.contextId).toBe(`chat-${binding.length}-a`);
      const gated = await a2aClient(env, 'gated', binding);
      const elsewhere = await gated
        .sendMessage(send([text('hijack')], { contextId: first.contextId }))
        .catch((e: unknown) => e);
      expect(elsewhere).toBeInstanceOf(RequestMalformedError);
    });

    it('starts one task for a message sent twice (its messageId), in a new context or a follow-up', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const request = send([text('only once')]);
      const first = asTask(await client.sendMessage(request));
      const again = asTask(await client.sendMessage(request));
      expect(again.id).toBe(first.id);
      expect(again.contextId).toBe(first.contextId);
      const followUp = send([text('and once more')], { contextId: first.contextId });
      const next = asTask(await client.sendMessage(followUp));
      expect(asTask(await client.sendMessage(followUp)).id).toBe(next.id);
      expect(next.id).not.toBe(first.id);
      const listed = await client.listTasks({
        tenant: '',
        contextId: first.contextId,
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(listed.tasks.map((t) => t.id).sort()).toEqual([first.id, next.id].sort());
      // Another token's message with the same id is its own.
      const other = await a2aClient(env, 'echo', binding, 'echoOnly');
      expect(asTask(await other.sendMessage(request)).id).not.toBe(first.id);
    });

    it('resubscribes after a dropped stream: the task as it stands, then every later change, none lost', async () => {
      const client = await a2aClient(env, 'paced', binding);
      const jsm = await jetstreamManagerOf(env.h.bus);
      const consumers = async () => (await jsm.consumers.list(STREAMS.events).next()).length;
      const idle = await consumers();
      const dropped = new AbortController();
      const before: string[] = [];
      let taskId = '';
      try {
        for await (const update of client.sendMessageStream(send([text('count slowly')]), {
          signal: dropped.signal,
        })) {
          before.push(describeUpdate(update));
          if (update.payload?.$case === 'task') taskId = update.payload.value.id;
          // The connection drops as soon as the first agent is at work.
          if (before.at(-1) === 'status:WORKING agent first is working on step one') dropped.abort();
        }
      } catch (error) {
        expect((error as Error).name).toBe('AbortError');
      }
      expect(before.at(-1)).toBe('status:WORKING agent first is working on step one');
      // The gateway saw the client go: the stream's consumer is gone from the server.
      await expect.poll(consumers, { timeout: 5_000 }).toBe(idle);
      // While nobody listens, the task moves on to its second agent.
      await expect
        .poll(
          async () => (await client.getTask({ id: taskId, tenant: '' })).status?.message?.parts[0]?.content,
          {
            timeout: 10_000,
          },
        )
        .toEqual({ $case: 'text', value: 'agent second is working on step two' });
      const after: StreamResponse[] = [];
      for await (const update of client.resubscribeTask({ id: taskId, tenant: '' })) after.push(update);
      const seen = after.map(describeUpdate);
      // It opens with the whole task as it stands: the change missed while away is in it.
      expect(seen[0]).toBe('task:WORKING');
      const opening = after[0]?.payload?.$case === 'task' ? after[0].payload.value : undefined;
      expect(opening?.status?.message?.parts[0]?.content).toEqual({
        $case: 'text',
        value: 'agent second is working on step two',
      });
      expect(opening?.history[0]?.parts[0]?.content).toEqual({ $case: 'text', value: 'count slowly' });
      // Then every change after it, in order, to the end — and nothing from before it again.
      expect(seen.slice(1)).toEqual([
        'status:WORKING agent second finished step two',
        'status:WORKING agent second hands step three over to agent third',
        'status:WORKING agent third is working on step three',
        'status:WORKING agent third finished step three',
        'artifact:output',
        'status:COMPLETED completed in 1 round(s)',
      ]);
    });
  });

  it('serves any task from any gateway: asked on one, answered on another, read on a third after the second is gone', async () => {
    const second = await startA2aGateway(env.h);
    const third = await startA2aGateway(env.h);
    try {
      const onFirst = await a2aClient(env, 'gated', 'JSONRPC');
      const waiting = asTask(await onFirst.sendMessage(send([text('release from one gateway')])));
      expect(stateName(waiting.status?.state)).toBe('INPUT_REQUIRED');
      const onSecond = await a2aClient({ gateway: second }, 'gated', 'HTTP+JSON');
      const done = asTask(
        await onSecond.sendMessage(
          send([text('approve')], { taskId: waiting.id, contextId: waiting.contextId }),
        ),
      );
      expect(stateName(done.status?.state)).toBe('COMPLETED');
      await second.close();
      const onThird = await a2aClient({ gateway: third }, 'gated', 'JSONRPC');
      const read = await onThird.getTask({ id: waiting.id, tenant: '' });
      expect(read.status?.state).toBe(done.status?.state);
      expect(read.artifacts).toEqual(done.artifacts);
      expect(read.history.map((m) => m.messageId)).toEqual(done.history.map((m) => m.messageId));
    } finally {
      await second.close();
      await third.close();
    }
  });

  it('answers a blocking SendMessage with the task as it stands when its gateway closes, and closes at once', async () => {
    const closing = await startA2aGateway(env.h);
    const client = await a2aClient({ gateway: closing }, 'slowpoke', 'JSONRPC');
    const steps = () =>
      env.h.events.filter((e) => e.kind === 'step.started' && e.pipeline === 'slowpoke').length;
    const before = steps();
    const waiting = client.sendMessage(send([text('ponder for a long time')]));
    await expect.poll(steps, { timeout: 10_000 }).toBeGreaterThan(before);
    const closedAt = Date.now();
    await closing.close();
    const task = asTask(await waiting);
    expect(Date.now() - closedAt).toBeLessThan(5_000);
    expect(stateName(task.status?.state)).toBe('WORKING');
    // The task itself goes on; any gateway answers for it.
    const other = await a2aClient(env, 'slowpoke', 'JSONRPC');
    expect(stateName((await other.getTask({ id: task.id, tenant: '' })).status?.state)).toBe('WORKING');
    await other.cancelTask({ id: task.id, tenant: '', metadata: undefined });
  });

  it('closes at once while an A2A stream is open, ending the stream and its connection', async () => {
    const closing = await startA2aGateway(env.h);
    const client = await a2aClient({ gateway: closing }, 'slowpoke', 'HTTP+JSON');
    const task = asTask(
      await client.sendMessage(send([text('ponder at length')], { returnImmediately: true })),
    );
    const seen: string[] = [];
    const following = (async () => {
      for await (const update of client.resubscribeTask({ id: task.id, tenant: '' })) {
        seen.push(describeUpdate(update));
      }
    })();
    await expect.poll(() => seen.length, { timeout: 10_000 }).toBeGreaterThan(0);
    const closedAt = Date.now();
    await closing.close();
    // A connection kept alive after its stream ended would hold the close for as long as the client keeps it.
    expect(Date.now() - closedAt).toBeLessThan(2_000);
    await following;
    const other = await a2aClient(env, 'slowpoke', 'JSONRPC');
    await other.cancelTask({ id: task.id, tenant: '', metadata: undefined });
  });

  it('without tokens (auth none), cards name no security scheme and requests need none', async () => {
    const open = await startGateway({
      bus: env.h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([]),
      auth: 'none',
      port: 0,
      dashboardDir: false,
      a2aPush: false,
    });
    try {
      const card = (await (await fetch(`${open.url}/a2a/echo/.well-known/agent-card.json`)).json()) as {
        capabilities: Record<string, unknown>;
      };
      expect(card).not.toHaveProperty('securitySchemes');
      expect(card.capabilities).toMatchObject({ streaming: true });
      expect(card.capabilities.pushNotifications).not.toBe(true);
      const client = await new ClientFactory().createFromUrl(`${open.url}/a2a/echo/`);
      const task = asTask(await client.sendMessage(send([text('no token needed')])));
      expect(stateName(task.status?.state)).toBe('COMPLETED');
    } finally {
      await open.close();
    }
  });

  describe('a token’s pipelines apply to every method', () => {
    it('refuses another pipeline’s endpoint, and hides its tasks from GetTask and ListTasks', async () => {
      const admin = await a2aClient(env, undefined, 'JSONRPC');
      const gatedTask = asTask(await admin.sendMessage(send([text('ship it')], { tenant: 'gated' })));
      const echoTask = asTask(await admin.sendMessage(send([text('a haiku')], { tenant: 'echo' })));
      expect(stateName(echoTask.status?.state)).toBe('COMPLETED');
      // The scoped token has no card for gated, and its requests there are refused.
      await expect(a2aClient(env, 'gated', 'JSONRPC', 'echoOnly')).rejects.toThrow(/404/);
      const scoped = await a2aClient(env, undefined, 'JSONRPC', 'echoOnly');
      const forbidden = await scoped
        .sendMessage(send([text('sneak')], { tenant: 'gated' }))
        .catch((e: unknown) => e);
      expect((forbidden as Error).message).toMatch(/may not touch pipeline gated/);
      expect(await scoped.getTask({ id: gatedTask.id, tenant: '' }).catch((e: unknown) => e)).toBeInstanceOf(
        TaskNotFoundError,
      );
      const listed = await scoped.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 100,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      const pipelines = new Set(listed.tasks.map((t) => t.metadata?.pipeline));
      expect([...pipelines]).toEqual(['echo']);
      expect(listed.tasks.map((t) => t.id)).toContain(echoTask.id);
      expect(listed.tasks.map((t) => t.id)).not.toContain(gatedTask.id);
      // Its own pipeline works through the gateway's endpoint too.
      expect(
        stateName(asTask(await scoped.sendMessage(send([text('ok')], { tenant: 'echo' }))).status?.state),
      ).toBe('COMPLETED');
      await admin.cancelTask({ id: gatedTask.id, tenant: '', metadata: undefined });
    });

    it('lets a read-only token read a task but not answer what it asks', async () => {
      const admin = await a2aClient(env, 'gated', 'HTTP+JSON');
      const waiting = asTask(await admin.sendMessage(send([text('needs a person')])));
      expect(stateName(waiting.status?.state)).toBe('INPUT_REQUIRED');
      const reader = await a2aClient(env, 'gated', 'HTTP+JSON', 'reader');
      expect(stateName((await reader.getTask({ id: waiting.id, tenant: '' })).status?.state)).toBe(
        'INPUT_REQUIRED',
      );
      const refused = await reader
        .sendMessage(send([text('approve')], { taskId: waiting.id, contextId: waiting.contextId }))
        .catch((e: unknown) => e);
      expect((refused as Error).message).toMatch(/lacks the approve scope/);
      await admin.cancelTask({ id: waiting.id, tenant: '', metadata: undefined });
    });

    it('asks the gateway’s endpoint to name the pipeline in tenant', async () => {
      const client = await a2aClient(env, undefined, 'HTTP+JSON');
      const unnamed = await client.sendMessage(send([text('which one?')])).catch((e: unknown) => e);
      expect(unnamed).toBeInstanceOf(RequestMalformedError);
      expect((unnamed as Error).message).toMatch(/name one in the request’s tenant/);
      const named = asTask(await client.sendMessage(send([text('this one')], { tenant: 'echo' })));
      expect(stateName(named.status?.state)).toBe('COMPLETED');
    });
  });

  // Last in the file: NATS is paused under the gateway, then started again.
  it('answers while NATS is down that the service is unavailable, on both bindings and for cards, never as an internal error', async () => {
    const v1 = { 'a2a-version': '1.0' };
    await env.h.nats.pause();
    try {
      const rpc = await raw(env, 'POST', '/a2a/echo/jsonrpc', {
        headers: v1,
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'some-task' } }),
      });
      expect(rpc.body).toMatchObject({
        id: 1,
        error: { message: expect.stringMatching(/cannot reach NATS/) },
      });
      const rest = await raw(env, 'GET', '/a2a/echo/rest/tasks/some-task', { headers: v1 });
      expect(rest.status).toBe(503);
      expect(rest.body).toMatchObject({ error: { code: 503, status: 'UNAVAILABLE' } });
      const card = await raw(env, 'GET', '/a2a/echo/.well-known/agent-card.json');
      expect(card.status).toBe(503);
    } finally {
      await env.h.nats.resume();
    }
    // Once NATS is back, so is the service.
    await expect
      .poll(
        async () =>
          (
            await raw(env, 'POST', '/a2a/echo/jsonrpc', {
              headers: v1,
              body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: 'some-task' } }),
            })
          ).body,
        { timeout: 30_000, interval: 500 },
      )
      .toMatchObject({ error: { code: -32001 } });
  }, 90_000);
});

describe('a task no coordinator has taken yet', () => {
  it('is SUBMITTED to GetTask and SubscribeToTask right after a send that returned at once, and followed to its end once a coordinator takes it', async () => {
    const quiet = await startA2aEnv();
    let second: { stop(): Promise<void> } | undefined;
    try {
      await quiet.h.coordinator.stop();
      const client = await a2aClient(quiet, 'summing', 'JSONRPC');
      const sent = asTask(
        await client.sendMessage(send([text('add'), data({ numbers: [1, 2] })], { returnImmediately: true })),
      );
      expect(stateName(sent.status?.state)).toBe('SUBMITTED');
      const read = await client.getTask({ id: sent.id, tenant: '' });
      expect(read.history[0]).toMatchObject({ role: Role.ROLE_USER });
      const seen: string[] = [];
      const following = (async () => {
        for await (const update of client.resubscribeTask({ id: sent.id, tenant: '' })) {
          seen.push(describeUpdate(update));
        }
      })();
      await expect.poll(() => seen[0], { timeout: 10_000 }).toBe('task:SUBMITTED');
      second = await startSecondCoordinator(quiet.h, ['summing.yaml']);
      await following;
      expect(seen).toContain('artifact:output');
      expect(seen.at(-1)).toMatch(/^status:COMPLETED/);
    } finally {
      await second?.stop();
      await quiet.stop();
    }
  }, 90_000);
});
