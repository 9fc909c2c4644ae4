import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AgentCard, type ListTasksRequest, TaskState } from '@a2a-js/sdk';
import {
  ContentTypeNotSupportedError,
  RequestMalformedError,
  TaskNotCancelableError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from '@a2a-js/sdk/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type A2aEnv,
  a2aClient,
  asTask,
  BINDINGS,
  data,
  describeUpdate,
  ECHO_OUTPUT,
  raw,
  send,
  startA2aEnv,
  stateName,
  TOKENS,
  text,
} from './support/a2aServer.ts';
import { repoRoot } from './support/harness.ts';

describe('the A2A server: every pipeline is an A2A agent', () => {
  let env: A2aEnv;

  beforeAll(async () => {
    env = await startA2aEnv();
  });
  afterAll(async () => {
    await env?.stop();
  });

  describe('cards', () => {
    it('serves a card per pipeline with both bindings, streaming, push and the bearer scheme', async () => {
      const { status, body, headers } = await raw(env, 'GET', '/a2a/echo/.well-known/agent-card.json');
      expect(status).toBe(200);
      expect(headers.get('cache-control')).toMatch(/max-age/);
      expect(body).toMatchObject({
        name: 'echo',
        description: 'Writes a haiku about the goal.',
        supportedInterfaces: [
          { url: `${env.gateway.url}/a2a/echo/jsonrpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
          { url: `${env.gateway.url}/a2a/echo/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' },
        ],
        capabilities: { streaming: true, pushNotifications: true },
        securitySchemes: { bearer: { httpAuthSecurityScheme: { scheme: 'Bearer' } } },
        securityRequirements: [{ schemes: { bearer: {} } }],
        skills: [{ id: 'echo', name: 'echo', tags: expect.arrayContaining(['writer']) }],
      });
      // The official client reads it as a card.
      const client = await a2aClient(env, 'echo', 'JSONRPC');
      expect((await client.getAgentCard()).name).toBe('echo');
    });

    it('serves the gateway’s card at the domain’s well-known place, listing only the pipelines a token may use', async () => {
      const all = await raw(env, 'GET', '/.well-known/agent-card.json');
      expect(all.status).toBe(200);
      const card = AgentCard.fromJSON(all.body);
      expect(card.skills.map((s) => s.id)).toEqual([
        'confirming',
        'echo',
        'gated',
        'hasty',
        'paced',
        'slowpoke',
        'summing',
      ]);
      expect(card.supportedInterfaces.map((i) => i.url)).toEqual([
        `${env.gateway.url}/a2a/jsonrpc`,
        `${env.gateway.url}/a2a/rest`,
      ]);
      const scoped = await raw(env, 'GET', '/.well-known/agent-card.json', { token: 'echoOnly' });
      expect(AgentCard.fromJSON(scoped.body).skills.map((s) => s.id)).toEqual(['echo']);
    });

    it('carries a pipeline’s input schema in a card extension; a message whose data misses it is REJECTED', async () => {
      const card = await raw(env, 'GET', '/a2a/summing/.well-known/agent-card.json');
      expect(card.body).toMatchObject({
        capabilities: {
          extensions: [
            {
              uri: 'https://troupe.dev/a2a/extensions/pipeline-schemas/v1',
              params: { input: { required: ['numbers'] } },
            },
          ],
        },
      });
      const client = await a2aClient(env, 'summing', 'JSONRPC');
      const refused = asTask(await client.sendMessage(send([text('add'), data({ numbers: 'three' })])));
      expect(stateName(refused.status?.state)).toBe('REJECTED');
      expect(refused.status?.message?.parts[0]?.content).toEqual({
        $case: 'text',
        value: expect.stringMatching(/input\.numbers/),
      });
      const added = asTask(await client.sendMessage(send([text('add'), data({ numbers: [1, 2] })])));
      expect(stateName(added.status?.state)).toBe('COMPLETED');
    });

    it('refuses a card without a token, and answers 404 for a pipeline that is not served or not the token’s', async () => {
      expect((await raw(env, 'GET', '/a2a/echo/.well-known/agent-card.json', { token: null })).status).toBe(
        401,
      );
      expect((await raw(env, 'GET', '/a2a/nope/.well-known/agent-card.json')).status).toBe(404);
      expect(
        (await raw(env, 'GET', '/a2a/gated/.well-known/agent-card.json', { token: 'echoOnly' })).status,
      ).toBe(404);
    });
  });

  it('runs examples/a2aClient.ts, as docs/interop.md shows it', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'examples', 'a2aClient.ts'),
        `${env.gateway.url}/a2a/paced/`,
        'count',
      ],
      { cwd: repoRoot, env: { ...process.env, TROUPE_TOKEN: TOKENS.admin }, timeout: 60_000 },
    );
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^task k-\S+ in context k-\S+$/);
    expect(lines).toContain('TASK_STATE_WORKING: agent first takes step one');
    expect(lines).toContain('TASK_STATE_WORKING: agent second is working on step two');
    expect(lines.slice(-2)).toEqual(['three done', 'TASK_STATE_COMPLETED: completed in 1 round(s)']);
  }, 90_000);

  describe.each(BINDINGS)('over %s', (binding) => {
    it('runs a task to COMPLETED, its output an artifact with a text and a data part', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const task = asTask(await client.sendMessage(send([text('the sea'), data({ mood: 'calm' })])));
      expect(stateName(task.status?.state)).toBe('COMPLETED');
      expect(task.contextId).toMatch(/^k-/);
      expect(task.artifacts[0]?.parts.map((p) => p.content)).toEqual([
        { $case: 'text', value: JSON.stringify(ECHO_OUTPUT) },
        { $case: 'data', value: ECHO_OUTPUT },
      ]);
      // The A2A task is the Troupe task: same id, and the message's parts became its goal and input.
      const accepted = env.h.eventsOf(task.id).find((e) => e.kind === 'task.accepted');
      expect(accepted?.data).toMatchObject({ goal: 'the sea', input: { mood: 'calm' } });
      expect(task.history[0]?.parts[0]?.content).toEqual({ $case: 'text', value: 'the sea' });
    });

    it('streams a task: the task first, then each agent at work, the artifact and COMPLETED', async () => {
      const client = await a2aClient(env, 'paced', binding);
      const seen: string[] = [];
      for await (const update of client.sendMessageStream(send([text('count to three')]))) {
        seen.push(describeUpdate(update));
      }
      expect(seen[0]).toBe('task:SUBMITTED');
      expect(seen).toEqual(
        expect.arrayContaining([
          'status:WORKING agent first is working on step one',
          'status:WORKING agent second is working on step two',
          'status:WORKING agent third is working on step three',
          'artifact:output',
        ]),
      );
      expect(seen.at(-1)).toMatch(/^status:COMPLETED/);
    });

    it('answers at once with returnImmediately; GetTask follows it to its end, with as much history as asked', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const task = asTask(await client.sendMessage(send([text('quick')], { returnImmediately: true })));
      expect(['SUBMITTED', 'WORKING', 'COMPLETED']).toContain(stateName(task.status?.state));
      await expect
        .poll(async () => stateName((await client.getTask({ id: task.id, tenant: '' })).status?.state), {
          timeout: 20_000,
        })
        .toBe('COMPLETED');
      const none = await client.getTask({ id: task.id, tenant: '', historyLength: 0 });
      expect(none.history).toEqual([]);
      const whole = await client.getTask({ id: task.id, tenant: '' });
      expect(whole.history.length).toBeGreaterThan(0);
    });

    it('lists the tasks of a context a page at a time, newest first, with filters', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const first = asTask(await client.sendMessage(send([text('one')])));
      const contextId = first.contextId;
      for (const goal of ['two', 'three']) {
        asTask(await client.sendMessage(send([text(goal)], { contextId })));
      }
      const list = (extra: Partial<ListTasksRequest>) =>
        client.listTasks({
          tenant: '',
          contextId,
          status: TaskState.TASK_STATE_UNSPECIFIED,
          pageToken: '',
          statusTimestampAfter: undefined,
          ...extra,
        });
      const page1 = await list({ pageSize: 2 });
      expect(page1.tasks).toHaveLength(2);
      expect(page1.totalSize).toBe(3);
      expect(page1.nextPageToken).not.toBe('');
      // Artifacts only when asked for.
      expect(page1.tasks[0]?.artifacts).toEqual([]);
      const page2 = await list({ pageSize: 2, pageToken: page1.nextPageToken });
      expect(page2.tasks).toHaveLength(1);
      expect(page2.nextPageToken).toBe('');
      const goals = [...page1.tasks, ...page2.tasks].map(
        (t) => env.h.eventsOf(t.id).find((e) => e.kind === 'task.accepted')?.data.goal,
      );
      expect(goals).toEqual(['three', 'two', 'one']);
      const stamps = [...page1.tasks, ...page2.tasks].map((t) => t.status?.timestamp ?? '');
      expect([...stamps].sort().reverse()).toEqual(stamps);
      expect(
        (await list({ status: TaskState.TASK_STATE_COMPLETED, includeArtifacts: true })).tasks,
      ).toHaveLength(3);
      const withArtifacts = await list({ pageSize: 1, includeArtifacts: true });
      expect(withArtifacts.tasks[0]?.artifacts[0]?.name).toBe('output');
      expect((await list({ status: TaskState.TASK_STATE_WORKING })).tasks).toEqual([]);
    });

    it('maps a failed task to FAILED with its reason', async () => {
      const client = await a2aClient(env, 'hasty', binding);
      const failed = asTask(await client.sendMessage(send([text('think fast')])));
      expect(stateName(failed.status?.state)).toBe('FAILED');
      expect(failed.status?.message?.parts.map((p) => p.content)).toEqual([
        { $case: 'text', value: expect.stringMatching(/^failed \(budget_exceeded\): /) },
        { $case: 'data', value: expect.objectContaining({ reason: 'budget_exceeded' }) },
      ]);
      // Listed with its artifacts asked for, it has none: an empty list, on either binding.
      const query = `contextId=${failed.contextId}&includeArtifacts=true`;
      const listed =
        binding === 'HTTP+JSON'
          ? (await raw(env, 'GET', `/a2a/hasty/rest/tasks?${query}`, { headers: { 'a2a-version': '1.0' } }))
              .body
          : ((
              await raw(env, 'POST', '/a2a/hasty/jsonrpc', {
                headers: { 'a2a-version': '1.0' },
                body: JSON.stringify({
                  jsonrpc: '2.0',
                  id: 1,
                  method: 'ListTasks',
                  params: { contextId: failed.contextId, includeArtifacts: true },
                }),
              })
            ).body.result as Record<string, unknown>);
      expect(listed).toMatchObject({ tasks: [{ id: failed.id, artifacts: [] }] });
    });

    it('cancels a running task (again: still CANCELED), and refuses to cancel one that ended', async () => {
      const slow = await a2aClient(env, 'slowpoke', binding);
      const task = asTask(await slow.sendMessage(send([text('think hard')], { returnImmediately: true })));
      await expect
        .poll(async () => stateName((await slow.getTask({ id: task.id, tenant: '' })).status?.state), {
          timeout: 20_000,
        })
        .toBe('WORKING');
      const cancelled = await slow.cancelTask({ id: task.id, tenant: '', metadata: undefined });
      expect(stateName(cancelled.status?.state)).toBe('CANCELED');
      expect(env.h.eventsOf(task.id).some((e) => e.kind === 'task.cancelled')).toBe(true);
      const again = await slow.cancelTask({ id: task.id, tenant: '', metadata: undefined });
      expect(stateName(again.status?.state)).toBe('CANCELED');

      const echo = await a2aClient(env, 'echo', binding);
      const done = asTask(await echo.sendMessage(send([text('done soon')])));
      const refused = await echo
        .cancelTask({ id: done.id, tenant: '', metadata: undefined })
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(TaskNotCancelableError);
    });

    it('answers an unknown task with TaskNotFound, and a message or subscription to an ended one with UnsupportedOperation', async () => {
      const client = await a2aClient(env, 'echo', binding);
      expect(
        await client.getTask({ id: 'no-such-task', tenant: '' }).catch((e: unknown) => e),
      ).toBeInstanceOf(TaskNotFoundError);
      const done = asTask(await client.sendMessage(send([text('short')])));
      const more = await client
        .sendMessage(send([text('and more')], { taskId: done.id, contextId: done.contextId }))
        .catch((e: unknown) => e);
      expect(more).toBeInstanceOf(UnsupportedOperationError);
      expect((more as Error).message).toMatch(/has ended \(completed\)/);
      const subscribe = async () => {
        for await (const _ of client.resubscribeTask({ id: done.id, tenant: '' })) {
          // Nothing: the subscription is refused before its first event.
        }
      };
      await expect(subscribe()).rejects.toThrow(/has ended/);
    });

    it('refuses file parts with ContentTypeNotSupported', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const file = {
        content: { $case: 'url' as const, value: 'https://example.com/a.pdf' },
        metadata: undefined,
        filename: 'a.pdf',
        mediaType: 'application/pdf',
      };
      expect(
        await client.sendMessage(send([text('read this'), file])).catch((e: unknown) => e),
      ).toBeInstanceOf(ContentTypeNotSupportedError);
    });

    it('keeps push notification configs of a task: create, get, list, delete', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const task = asTask(await client.sendMessage(send([text('notify me')])));
      const made = await client.createTaskPushNotificationConfig({
        tenant: '',
        id: '',
        taskId: task.id,
        url: 'http://127.0.0.1:9/hook',
        token: 'receiver-token',
        authentication: undefined,
      });
      expect(made).toMatchObject({ taskId: task.id, url: 'http://127.0.0.1:9/hook' });
      expect(made.id).not.toBe('');
      const got = await client.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: made.id });
      expect(got.url).toBe('http://127.0.0.1:9/hook');
      const listed = await client.listTaskPushNotificationConfig({
        tenant: '',
        taskId: task.id,
        pageSize: 0,
        pageToken: '',
      });
      expect(listed.configs.map((c) => c.id)).toEqual([made.id]);
      await client.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: made.id });
      expect(
        (
          await client.listTaskPushNotificationConfig({
            tenant: '',
            taskId: task.id,
            pageSize: 0,
            pageToken: '',
          })
        ).configs,
      ).toEqual([]);
      const missing = await client
        .getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: made.id })
        .catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(TaskNotFoundError);
    });

    it('keeps the push config a message carries for the task it starts, and refuses a bad one before any task', async () => {
      const client = await a2aClient(env, 'echo', binding);
      const withHook = (url: string) => ({
        ...send([text('tell my hook')]),
        configuration: {
          acceptedOutputModes: [],
          returnImmediately: true,
          taskPushNotificationConfig: {
            tenant: '',
            id: 'inline',
            taskId: '',
            url,
            token: '',
            authentication: undefined,
          },
        },
      });
      const task = asTask(await client.sendMessage(withHook('http://127.0.0.1:9/inline')));
      const listed = await client.listTaskPushNotificationConfig({
        tenant: '',
        taskId: task.id,
        pageSize: 0,
        pageToken: '',
      });
      expect(listed.configs.map((c) => [c.id, c.url])).toEqual([['inline', 'http://127.0.0.1:9/inline']]);
      const before = env.h.events.filter((e) => e.kind === 'task.accepted').length;
      const refused = await client.sendMessage(withHook('ftp://127.0.0.1/hook')).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RequestMalformedError);
      // A task sent after it runs to its end; had the refused one started before it, it would be counted too.
      asTask(await client.sendMessage(send([text('after the refusal')])));
      expect(env.h.events.filter((e) => e.kind === 'task.accepted')).toHaveLength(before + 1);
    });
  });

  describe('bad requests get the spec’s errors', () => {
    const rpc = (
      body: unknown,
      headers: Record<string, string> = { 'a2a-version': '1.0' },
      path = '/a2a/echo/jsonrpc',
    ) => raw(env, 'POST', path, { body: typeof body === 'string' ? body : JSON.stringify(body), headers });
    const getTask = { jsonrpc: '2.0', id: 7, method: 'GetTask', params: { id: 'no-such-task' } };

    it('JSON-RPC: parse error, invalid request, unknown method, invalid params, task not found', async () => {
      expect((await rpc('{not json')).body).toMatchObject({ id: null, error: { code: -32700 } });
      expect((await rpc({ jsonrpc: '1.0', method: 'GetTask' })).body).toMatchObject({
        error: { code: -32600 },
      });
      expect((await rpc([1, 2])).body).toMatchObject({ error: { code: -32600 } });
      expect((await rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: {} })).body).toMatchObject({
        id: 1,
        error: { code: -32601 },
      });
      const asAgent = { messageId: 'm-agent', role: 'ROLE_AGENT', parts: [{ text: 'hello' }] };
      expect(
        (await rpc({ jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: asAgent } })).body,
      ).toMatchObject({ error: { code: -32602, message: expect.stringMatching(/message\.role/) } });
      expect((await rpc({ jsonrpc: '2.0', id: 2, method: 'SendMessage', params: {} })).body).toMatchObject({
        error: { code: -32602 },
      });
      // What the SDK's reader cannot take is the client's to fix, not an internal error.
      const nullPart = { messageId: 'm-null', role: 'ROLE_USER', parts: [null] };
      for (const method of ['SendMessage', 'SendStreamingMessage']) {
        expect(
          (await rpc({ jsonrpc: '2.0', id: 8, method, params: { message: nullPart } })).body,
        ).toMatchObject({
          id: 8,
          error: { code: -32602 },
        });
      }
      expect(
        (await rpc({ jsonrpc: '2.0', id: 3, method: 'ListTasks', params: { pageSize: 500 } })).body,
      ).toMatchObject({
        error: { code: -32602, message: expect.stringMatching(/pageSize/) },
      });
      // The card says extendedAgentCard: false, so the spec wants UnsupportedOperation (not "not configured").
      expect(
        (await rpc({ jsonrpc: '2.0', id: 4, method: 'GetExtendedAgentCard', params: {} })).body,
      ).toMatchObject({ error: { code: -32004 } });
      expect(
        (await rpc({ jsonrpc: '2.0', id: 5, method: 'GetTask', params: { id: 'x', historyLength: 'all' } }))
          .body,
      ).toMatchObject({ error: { code: -32602, message: expect.stringMatching(/historyLength/) } });
      for (const id of ['a.b*c', ' ', '$KV.x', 'a>b']) {
        expect((await rpc({ ...getTask, params: { id } })).body).toMatchObject({ error: { code: -32001 } });
      }
      expect(
        (await rpc({ jsonrpc: '2.0', id: 6, method: 'ListTasks', params: { status: 'TASK_STATE_NOPE' } }))
          .body,
      ).toMatchObject({ error: { code: -32602, message: expect.stringMatching(/^status/) } });
      const notFound = await rpc(getTask);
      expect(notFound.status).toBe(200);
      expect(notFound.body).toMatchObject({
        id: 7,
        error: { code: -32001, data: [{ reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org' }] },
      });
    });

    it('A2A-Version: absent means 0.3, which is refused with VersionNotSupported; 1.0 by header or query is served', async () => {
      for (const headers of [{}, { 'a2a-version': '0.3' }, { 'a2a-version': '2.0' }]) {
        expect((await rpc(getTask, headers)).body).toMatchObject({
          error: { code: -32009, message: expect.stringMatching(/Supported versions: 1\.0/) },
        });
      }
      expect((await rpc(getTask, {}, '/a2a/echo/jsonrpc?A2A-Version=1.0')).body).toMatchObject({
        error: { code: -32001 },
      });
      // A patch number is not considered (spec §3.6): 1.0.1 is 1.0.
      expect((await rpc(getTask, { 'a2a-version': '1.0.1' })).body).toMatchObject({
        error: { code: -32001 },
      });
      const rest = await raw(env, 'GET', '/a2a/echo/rest/tasks/no-such-task');
      expect(rest.status).toBe(400);
      expect(rest.body).toMatchObject({
        error: { code: 400, details: [{ reason: 'VERSION_NOT_SUPPORTED' }] },
      });
    });

    it('HTTP+JSON: 404 for an unknown task or path, ContentTypeNotSupported for a body that is not JSON', async () => {
      const v1 = { 'a2a-version': '1.0' };
      const unknown = await raw(env, 'GET', '/a2a/echo/rest/tasks/no-such-task', { headers: v1 });
      expect(unknown.status).toBe(404);
      expect(unknown.headers.get('content-type')).toMatch(/application\/a2a\+json/);
      expect(unknown.body).toMatchObject({ error: { code: 404, status: 'NOT_FOUND' } });
      expect((await raw(env, 'GET', '/a2a/echo/rest/nothing/here', { headers: v1 })).status).toBe(404);
      expect((await raw(env, 'GET', '/a2a/echo/rest/extendedAgentCard', { headers: v1 })).body).toMatchObject(
        {
          error: { code: 400, details: [{ reason: 'UNSUPPORTED_OPERATION' }] },
        },
      );
      expect((await raw(env, 'DELETE', '/a2a/echo/rest/message:send', { headers: v1 })).status).toBe(405);
      const nullPart = await raw(env, 'POST', '/a2a/echo/rest/message:send', {
        headers: v1,
        body: JSON.stringify({ message: { messageId: 'm-null', role: 'ROLE_USER', parts: [null] } }),
      });
      expect(nullPart.status).toBe(400);
      expect(nullPart.body).toMatchObject({ error: { details: [{ reason: 'INVALID_PARAMS' }] } });
      const twice = await raw(env, 'GET', '/a2a/echo/rest/tasks?pageSize=1&pageSize=2', { headers: v1 });
      expect(twice.status).toBe(400);
      expect(twice.body).toMatchObject({
        error: { message: expect.stringMatching(/^pageSize: given more than once/) },
      });
      const plain = await raw(env, 'POST', '/a2a/echo/rest/message:send', {
        headers: { ...v1, 'content-type': 'text/plain' },
        body: 'hello',
      });
      expect(plain.body).toMatchObject({ error: { details: [{ reason: 'CONTENT_TYPE_NOT_SUPPORTED' }] } });
    });

    it('HTTP+JSON: SubscribeToTask by GET as the proto has it, beside the POST the client sends', async () => {
      const client = await a2aClient(env, 'slowpoke', 'HTTP+JSON');
      const task = asTask(await client.sendMessage(send([text('ponder')], { returnImmediately: true })));
      const stop = new AbortController();
      const response = await fetch(`${env.gateway.url}/a2a/slowpoke/rest/tasks/${task.id}:subscribe`, {
        headers: { authorization: `Bearer ${TOKENS.admin}`, 'a2a-version': '1.0' },
        signal: stop.signal,
      });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      const { value } = await reader.read();
      const first = new TextDecoder().decode(value);
      expect(first).toMatch(/^data: /);
      expect(JSON.parse(first.slice('data: '.length))).toMatchObject({ task: { id: task.id } });
      stop.abort();
      await client.cancelTask({ id: task.id, tenant: '', metadata: undefined });
    });

    it('refuses a body over the gateway’s limit in the binding’s own form', async () => {
      const huge = JSON.stringify({ ...getTask, params: { id: 'x'.repeat(2_000_000) } });
      const tooLarge = await rpc(huge);
      expect(tooLarge.status).toBe(413);
      expect(tooLarge.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
      const rest = await raw(env, 'POST', '/a2a/echo/rest/message:send', {
        headers: { 'a2a-version': '1.0' },
        body: huge,
      });
      expect(rest.status).toBe(413);
      expect(rest.body).toMatchObject({ error: { code: 413, status: 'INVALID_ARGUMENT' } });
    });

    it('refuses a request without a token with 401 on both bindings', async () => {
      const rpcRefused = await raw(env, 'POST', '/a2a/echo/jsonrpc', {
        token: null,
        body: JSON.stringify(getTask),
        headers: { 'a2a-version': '1.0' },
      });
      expect(rpcRefused.status).toBe(401);
      expect(rpcRefused.body).toMatchObject({ id: 7, error: { code: -32040 } });
      // Its params are not looked at before its token.
      const badParams = {
        jsonrpc: '2.0',
        id: 8,
        method: 'SendMessage',
        params: { message: { parts: [null] } },
      };
      expect(
        (
          await raw(env, 'POST', '/a2a/echo/jsonrpc', {
            token: null,
            body: JSON.stringify(badParams),
            headers: { 'a2a-version': '1.0' },
          })
        ).status,
      ).toBe(401);
      const restRefused = await raw(env, 'GET', '/a2a/echo/rest/tasks', {
        token: null,
        headers: { 'a2a-version': '1.0' },
      });
      expect(restRefused.status).toBe(401);
      expect(restRefused.body).toMatchObject({ error: { code: 401, status: 'UNAUTHENTICATED' } });
    });

    it('REJECTS a task for an unknown pipeline, or one with no goal, with the reason', async () => {
      const sendTo = (path: string, parts: unknown[]) =>
        rpc(
          {
            jsonrpc: '2.0',
            id: 9,
            method: 'SendMessage',
            params: { message: { messageId: 'm-1', role: 'ROLE_USER', parts } },
          },
          { 'a2a-version': '1.0' },
          path,
        );
      const unknown = await sendTo('/a2a/nope/jsonrpc', [{ text: 'hello' }]);
      expect(unknown.body).toMatchObject({
        result: {
          task: {
            status: {
              state: 'TASK_STATE_REJECTED',
              message: { parts: [{ text: expect.stringMatching(/no pipeline named nope/) }] },
            },
          },
        },
      });
      const noGoal = await sendTo('/a2a/echo/jsonrpc', [{ data: { only: 'data' } }]);
      expect(noGoal.body).toMatchObject({ result: { task: { status: { state: 'TASK_STATE_REJECTED' } } } });
    });
  });
});
