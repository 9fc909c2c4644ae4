import { StreamResponse, TaskPushNotificationConfig } from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { followTaskEvents } from '@troupe/client';
import {
  type Gateway,
  hashToken,
  PushConfigs,
  PushError,
  type PushSettings,
  startGateway,
  TaskFold,
  TokenStore,
} from '@troupe/gateway';
import { A2A_PUSH_QUEUE, subjects, type TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { asTask, send, text } from './support/a2aServer.ts';
import { type CliProcess, startTroupe } from './support/cli.ts';
import {
  examplePath,
  fixturePath,
  type Harness,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';
import { WebhookReceiver } from './support/webhookReceiver.ts';

const ADMIN = 'admin-token-0123456789abcdef';

/** Short waits, so a receiver that is down a few seconds is tried again several times, and given up on after 6 s. */
const PUSH: PushSettings = {
  urlPolicy: { allowPrivate: true },
  retry: { firstMs: 100, maxMs: 400, giveUpAfterMs: 6_000 },
  ackWaitMs: 2_000,
  timeoutMs: 2_000,
};

describe('A2A push notifications: every state change, at least once, in order, through restarts', () => {
  let h: Harness;
  /** Submits and decides over HTTP; delivers no webhooks, so each test says which gateway does. */
  let api: Gateway;
  let configs: PushConfigs;
  const receiver = new WebhookReceiver();
  const logLines: string[] = [];
  const tokens = new TokenStore([{ name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] }]);

  /** A gateway that delivers webhooks, on a NATS connection of its own (so a test can cut it as a crash would). */
  const pushGateway = async () => {
    const logger = createLogger({
      level: 'info',
      destination: { write: (line: string) => void logLines.push(line) },
    });
    const bus = await NatsBus.connect({ servers: h.nats.url, name: 'push-gateway', logger });
    const gateway = await startGateway({ bus, logger, tokens, port: 0, dashboardDir: false, a2aPush: PUSH });
    return {
      gateway,
      bus,
      async close() {
        await gateway.close();
        await bus.close();
      },
    };
  };

  const call = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${api.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    expect(response.status, `${method} ${path}`).toBeLessThan(300);
    return response.json() as Promise<Record<string, unknown>>;
  };

  const submit = (pipeline: string, taskId: string) =>
    call('POST', `/v1/pipelines/${pipeline}/tasks`, { id: taskId, goal: `push test ${taskId}` });

  const configFor = (taskId: string, extra: Partial<TaskPushNotificationConfig> = {}) =>
    configs.create(
      { taskId, pipeline: taskId.startsWith('gated') ? 'gated' : 'demo', contextId: `ctx-${taskId}` },
      TaskPushNotificationConfig.fromJSON({ url: receiver.url, ...extra }),
      'ops',
    );

  /** The bodies the receiver got for a task, each once (a redelivery repeats a body whole). */
  const bodiesOf = (taskId: string) => {
    const seen = new Set<string>();
    return receiver.received
      .map((hook) => hook.body as Record<string, { taskId?: string; id?: string }>)
      .filter((body) => Object.values(body)[0]?.taskId === taskId || Object.values(body)[0]?.id === taskId)
      .filter((body) => {
        const key = JSON.stringify(body);
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      });
  };

  /** Every update A2A shows of the task, from its events as `EVENTS` stored them: what its webhook must get. */
  const expectedBodies = async (taskId: string, pipeline: string, contextId = `ctx-${taskId}`) => {
    const events: TroupeEvent[] = [];
    await followTaskEvents(
      h.bus,
      { taskId, pipeline },
      {
        signal: AbortSignal.timeout(30_000),
        onEvent: ({ event }) => void events.push(event),
      },
    );
    const fold = new TaskFold({ taskId, contextId });
    return events.flatMap((event) => fold.apply(event)).map((update) => StreamResponse.toJSON(update));
  };

  const stateOf = (body: unknown) =>
    (body as { statusUpdate?: { status?: { state?: string } } }).statusUpdate?.status?.state;

  /** Waits until the receiver got a status of `state` for the task. */
  const receivedState = (taskId: string, state: string) =>
    expect
      .poll(() => bodiesOf(taskId).some((body) => stateOf(body) === state), { timeout: 30_000 })
      .toBe(true);

  /** Allows the approval the task waits on, once it asks. */
  const approvePending = async (taskId: string) => {
    const id = await vi.waitFor(
      async () => {
        const pending = (await call('GET', '/v1/approvals')) as {
          requests?: { id: string; taskId: string }[];
        };
        const request = pending.requests?.find((a) => a.taskId === taskId);
        if (!request) throw new Error(`no pending approval of ${taskId} yet`);
        return request.id;
      },
      { timeout: 30_000, interval: 200 },
    );
    await call('POST', `/v1/approvals/${id}`, { decision: 'allow' });
  };

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml'), fixturePath('gated.yaml')]);
    api = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens,
      port: 0,
      dashboardDir: false,
      a2aPush: false,
    });
    configs = await PushConfigs.open(h.bus, { urlPolicy: PUSH.urlPolicy ?? {} });
    await receiver.start();
  });
  afterAll(async () => {
    await api?.close();
    await receiver.stop();
    await h?.stop();
  });

  // First: no gateway's worker has made the queue yet.
  it('queues a config made before any gateway has started delivering', async () => {
    const made = await configFor('push-early');
    const jsm = await jetstreamManager(h.bus.connection);
    const queued = await jsm.streams.info(A2A_PUSH_QUEUE.stream, { subjects_filter: '>' });
    expect(queued.state.subjects).toHaveProperty(subjects.a2aPushJob('push-early', made.id));
    expect(await configs.delete('push-early', made.id)).toBe(true);
  });

  it('sends each state change of a task to its webhook, in order, with the config’s credentials', async () => {
    const pusher = await pushGateway();
    try {
      const made = await configFor('push-all', {
        token: 'task-token-1',
        authentication: { scheme: 'Bearer', credentials: 'hook-secret' },
      });
      expect(made.id).toMatch(/^[0-9a-f-]{36}$/);
      await submit('demo', 'push-all');
      await receivedState('push-all', 'TASK_STATE_COMPLETED');
      const expected = await expectedBodies('push-all', 'demo');
      expect(expected.length).toBeGreaterThan(3);
      expect(bodiesOf('push-all')).toEqual(expected);
      const states = expected.map(stateOf).filter(Boolean);
      expect(states[0]).toBe('TASK_STATE_SUBMITTED');
      expect(states).toContain('TASK_STATE_WORKING');
      expect(states.at(-1)).toBe('TASK_STATE_COMPLETED');
      // The final output arrives as an artifact, before the completed status.
      expect(Object.keys(expected.at(-2) ?? {})).toEqual(['artifactUpdate']);
      const hook = receiver.received.find((r) => Object.values(r.body as object)[0]?.taskId === 'push-all');
      expect(hook?.headers).toMatchObject({
        'content-type': 'application/a2a+json',
        authorization: 'Bearer hook-secret',
        'x-a2a-notification-token': 'task-token-1',
      });
      await expect
        .poll(async () => (await configs.get('push-all', made.id))?.delivery.state, { timeout: 10_000 })
        .toBe('done');
    } finally {
      await pusher.close();
    }
  });

  it('still delivers every state change when the receiver is down mid-task and comes back on the same port', async () => {
    const pusher = await pushGateway();
    try {
      const made = await configFor('gated-receiver');
      await submit('gated', 'gated-receiver');
      await receivedState('gated-receiver', 'TASK_STATE_INPUT_REQUIRED');
      await receiver.stop();
      await approvePending('gated-receiver');
      await h.finalOf('gated-receiver');
      // The receiver refused at least once while the task went on and ended.
      await expect
        .poll(async () => (await configs.get('gated-receiver', made.id))?.delivery.attempts ?? 0, {
          timeout: 10_000,
        })
        .toBeGreaterThan(0);
      expect((await configs.get('gated-receiver', made.id))?.delivery.lastError).toMatch(/ECONNREFUSED/);
      await receiver.start();
      await receivedState('gated-receiver', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('gated-receiver')).toEqual(await expectedBodies('gated-receiver', 'gated'));
    } finally {
      if (!receiver.running) await receiver.start();
      await pusher.close();
    }
  });

  it('hands a task’s webhook to the next gateway when the one delivering it stops mid-task', async () => {
    const first = await pushGateway();
    let second: Awaited<ReturnType<typeof pushGateway>> | undefined;
    try {
      await configFor('gated-handover');
      await submit('gated', 'gated-handover');
      await receivedState('gated-handover', 'TASK_STATE_INPUT_REQUIRED');
      await first.close();
      await approvePending('gated-handover');
      await h.finalOf('gated-handover');
      second = await pushGateway();
      await receivedState('gated-handover', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('gated-handover')).toEqual(await expectedBodies('gated-handover', 'gated'));
    } finally {
      await second?.close();
    }
  });

  it('takes over the webhooks of a gateway that died mid-task, once its hold runs out', async () => {
    const doomed = await pushGateway();
    let survivor: Awaited<ReturnType<typeof pushGateway>> | undefined;
    try {
      await configFor('gated-crash');
      await submit('gated', 'gated-crash');
      // Delivered so far by the only gateway that delivers: it holds the config.
      await receivedState('gated-crash', 'TASK_STATE_INPUT_REQUIRED');
      survivor = await pushGateway();
      // A crash, as the server sees it: the connection goes with no goodbye, the config still held.
      await doomed.bus.connection.close();
      await approvePending('gated-crash');
      await h.finalOf('gated-crash');
      await receivedState('gated-crash', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('gated-crash')).toEqual(await expectedBodies('gated-crash', 'gated'));
    } finally {
      await doomed.close().catch(() => undefined);
      await survivor?.close();
    }
  });

  it('sends nothing more to a config deleted while its task waits, and ends its place in the queue', async () => {
    const pusher = await pushGateway();
    try {
      const kept = await configFor('gated-deleted', { url: `${receiver.url}?config=kept` });
      const deleted = await configFor('gated-deleted', { url: `${receiver.url}?config=deleted` });
      const toDeleted = () => receiver.received.filter((hook) => hook.path.endsWith('config=deleted')).length;
      await submit('gated', 'gated-deleted');
      await expect
        .poll(
          () =>
            receiver.received.some(
              (hook) =>
                hook.path.endsWith('config=deleted') && stateOf(hook.body) === 'TASK_STATE_INPUT_REQUIRED',
            ),
          { timeout: 30_000 },
        )
        .toBe(true);
      await receivedState('gated-deleted', 'TASK_STATE_INPUT_REQUIRED');
      const before = toDeleted();
      expect(await configs.delete('gated-deleted', deleted.id)).toBe(true);
      await approvePending('gated-deleted');
      await expect
        .poll(
          () =>
            receiver.received.some(
              (hook) => hook.path.endsWith('config=kept') && stateOf(hook.body) === 'TASK_STATE_COMPLETED',
            ),
          { timeout: 30_000 },
        )
        .toBe(true);
      // The deleted config's place in the queue is acked once its worker sees it gone; the kept one's once done.
      const jsm = await jetstreamManager(h.bus.connection);
      await expect
        .poll(
          async () =>
            (await jsm.streams.info(A2A_PUSH_QUEUE.stream, { subjects_filter: '>' })).state.subjects ?? {},
          {
            timeout: 10_000,
          },
        )
        .not.toHaveProperty(subjects.a2aPushJob('gated-deleted', deleted.id));
      await expect
        .poll(async () => (await configs.get('gated-deleted', kept.id))?.delivery.state, { timeout: 10_000 })
        .toBe('done');
      expect(toDeleted()).toBe(before);
    } finally {
      await pusher.close();
    }
  });

  it('makes the queue’s consumer again when it is deleted under a running gateway, and delivers', async () => {
    const pusher = await pushGateway();
    try {
      const jsm = await jetstreamManager(h.bus.connection);
      await expect
        .poll(async () => (await jsm.consumers.list(A2A_PUSH_QUEUE.stream).next()).map((c) => c.name))
        .toEqual([A2A_PUSH_QUEUE.consumer]);
      // nats-server 2.9 may refuse a delete while the consumer's state is being written ("directory not empty").
      await vi.waitFor(
        async () => {
          const names = (await jsm.consumers.list(A2A_PUSH_QUEUE.stream).next()).map((c) => c.name);
          if (names.includes(A2A_PUSH_QUEUE.consumer))
            await jsm.consumers.delete(A2A_PUSH_QUEUE.stream, A2A_PUSH_QUEUE.consumer);
        },
        { timeout: 10_000, interval: 200 },
      );
      await configFor('push-healed');
      await submit('demo', 'push-healed');
      await receivedState('push-healed', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('push-healed')).toEqual(await expectedBodies('push-healed', 'demo'));
    } finally {
      await pusher.close();
    }
  });

  it('gives a receiver that stays down up after the limit, saying so in the log and the config', async () => {
    const pusher = await pushGateway();
    try {
      const dead = new WebhookReceiver();
      await dead.start();
      const url = dead.url;
      await dead.stop();
      const made = await configs.create(
        { taskId: 'push-dead', pipeline: 'demo' },
        TaskPushNotificationConfig.fromJSON({ url }),
        'ops',
      );
      await submit('demo', 'push-dead');
      await expect
        .poll(async () => (await configs.get('push-dead', made.id))?.delivery.state, { timeout: 20_000 })
        .toBe('dropped');
      const line = logLines
        .map((l) => JSON.parse(l) as { level: number; msg: string })
        .find((l) => l.msg.includes(`gave up on push config ${made.id} of task push-dead`));
      expect(line?.level).toBe(50);
      expect(line?.msg).toContain('nothing more is sent to it');
      // Made again once its receiver is back, the config goes on from where it stopped: here, the task's first update.
      await h.finalOf('push-dead');
      await dead.start();
      await configs.create(
        { taskId: 'push-dead', pipeline: 'demo' },
        TaskPushNotificationConfig.fromJSON({ id: made.id, url }),
        'ops',
      );
      await expect
        .poll(() => dead.received.some((hook) => stateOf(hook.body) === 'TASK_STATE_COMPLETED'), {
          timeout: 30_000,
        })
        .toBe(true);
      const got = [...new Map(dead.received.map((hook) => [JSON.stringify(hook.body), hook.body])).values()];
      expect(got).toEqual(await expectedBodies('push-dead', 'demo', ''));
      await dead.stop();
    } finally {
      await pusher.close();
    }
  });

  it('keeps, lists and deletes configs, and refuses ones it cannot deliver', async () => {
    const strict = await PushConfigs.open(h.bus);
    const refusal = (url: string) =>
      strict
        .create(
          { taskId: 'push-crud', pipeline: 'demo' },
          TaskPushNotificationConfig.fromJSON({ url }),
          'ops',
        )
        .then(
          () => undefined,
          (error: unknown) => error,
        );
    for (const url of [
      'http://127.0.0.1:9/x',
      'http://localhost/x',
      'http://10.1.2.3/',
      'http://[::1]/',
      'http://169.254.169.254/latest',
    ]) {
      const error = await refusal(url);
      expect(PushError.is(error, 'url_refused'), url).toBe(true);
      expect((error as Error).message).toMatch(/private, loopback or link-local/);
    }
    expect(PushError.is(await refusal('file:///etc/passwd'), 'url_refused')).toBe(true);
    expect(PushError.is(await refusal('not a url'), 'invalid_config')).toBe(true);
    expect(PushError.is(await refusal('https://user:pw@hooks.example.com/'), 'url_refused')).toBe(true);
    const allowList = await PushConfigs.open(h.bus, { urlPolicy: { allowHosts: ['*.example.com'] } });
    await expect(
      allowList.create(
        { taskId: 'push-crud', pipeline: 'demo' },
        TaskPushNotificationConfig.fromJSON({ url: 'https://hooks.elsewhere.org/' }),
        'ops',
      ),
    ).rejects.toThrow(/sends webhooks only to \*\.example\.com/);

    const made = await configs.create(
      { taskId: 'push-crud', pipeline: 'demo' },
      TaskPushNotificationConfig.fromJSON({ id: 'mine', url: receiver.url, token: 't' }),
      'ops',
    );
    expect(made).toMatchObject({ id: 'mine', taskId: 'push-crud', url: receiver.url, token: 't' });
    await expect(
      configs.create(
        { taskId: 'push-crud', pipeline: 'demo' },
        TaskPushNotificationConfig.fromJSON({ id: 'no spaces', url: receiver.url }),
        'ops',
      ),
    ).rejects.toThrow(/push config id "no spaces" refused/);
    await expect(
      configs.create(
        { taskId: 'push-crud', pipeline: 'demo' },
        TaskPushNotificationConfig.fromJSON({ url: receiver.url, token: 'a\r\nX-Injected: 1' }),
        'ops',
      ),
    ).rejects.toThrow(/line break/);
    const other = await configs.create(
      { taskId: 'push-crud', pipeline: 'demo' },
      TaskPushNotificationConfig.fromJSON({ url: receiver.url }),
      'ops',
    );
    const listed = await configs.list('push-crud');
    expect(listed.map((e) => e.config.id)).toEqual(['mine', other.id]);
    expect(listed[0]).toMatchObject({ pipeline: 'demo', createdBy: 'ops', delivery: { state: 'active' } });
    expect(await configs.delete('push-crud', 'mine')).toBe(true);
    expect(await configs.delete('push-crud', 'mine')).toBe(false);
    expect(await configs.get('push-crud', 'mine')).toBeUndefined();
    expect((await configs.list('push-crud')).map((e) => e.config.id)).toEqual([other.id]);
  });
  it('takes push configs from the official A2A client, on a gateway started with troupe gateway --push-private', async () => {
    const serve = (...flags: string[]) =>
      startTroupe(['gateway', '--listen', '127.0.0.1:0', '--no-auth', '--server', h.nats.url, ...flags]);
    const urlOf = async (cli: CliProcess) => {
      await cli.waitFor(/troupe gateway on http/, 30_000);
      return /gateway on (http:\/\/[\d.]+:\d+)/.exec(cli.output())?.[1] ?? '';
    };
    const strict = serve();
    try {
      // Without --push-private, a webhook on this machine is refused, saying why.
      const client = await sdkClient(await urlOf(strict), 'gated', 'JSONRPC');
      const task = asTask(
        await client.sendMessage(send([text('no hooks here')], { returnImmediately: true })),
      );
      await expect(
        client.createTaskPushNotificationConfig(
          TaskPushNotificationConfig.fromJSON({ taskId: task.id, url: receiver.url }),
        ),
      ).rejects.toThrow(/private, loopback or link-local address/);
      await approvePending(task.id);
    } finally {
      await strict.stop();
    }
    const open = serve('--push-private');
    try {
      const url = await urlOf(open);
      const client = await sdkClient(url, 'gated', 'HTTP+JSON');
      const task = asTask(
        await client.sendMessage(send([text('release with a webhook')], { returnImmediately: true })),
      );
      // Right after a send that returns at once: the task may not be taken by a coordinator yet.
      const made = await client.createTaskPushNotificationConfig(
        TaskPushNotificationConfig.fromJSON({
          taskId: task.id,
          url: `${receiver.url}?config=sdk`,
          token: 'sdk-token',
          authentication: { scheme: 'Bearer', credentials: 'sdk-secret' },
        }),
      );
      expect(made.id).not.toBe('');
      const listing = { tenant: '', taskId: task.id, pageSize: 0, pageToken: '' };
      // Read back, a config shows where it goes and how, never its secrets: any token that reads the task may ask.
      const listed = (await client.listTaskPushNotificationConfig(listing)).configs;
      expect(listed.map((c) => c.id)).toEqual([made.id]);
      const read = await client.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: made.id });
      expect(read).toMatchObject({
        url: `${receiver.url}?config=sdk`,
        token: '',
        authentication: { scheme: 'Bearer', credentials: '' },
      });
      expect(JSON.stringify([read, listed])).not.toMatch(/sdk-(token|secret)/);
      await receivedState(task.id, 'TASK_STATE_INPUT_REQUIRED');
      await approvePending(task.id);
      await receivedState(task.id, 'TASK_STATE_COMPLETED');
      // Made after the task began, the config still gets its every state, from SUBMITTED on.
      expect(bodiesOf(task.id)).toEqual(await expectedBodies(task.id, 'gated', task.contextId));
      const hook = receiver.received.find((r) => r.path.endsWith('config=sdk'));
      expect(hook?.headers).toMatchObject({
        authorization: 'Bearer sdk-secret',
        'x-a2a-notification-token': 'sdk-token',
      });
      await client.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: made.id });
      expect((await client.listTaskPushNotificationConfig(listing)).configs).toEqual([]);

      // A config sent with the message that starts a task gets that task's every update too; one that would be
      // refused (a token that would break its header) is refused before any task starts.
      const rpc = await sdkClient(url, 'demo', 'JSONRPC');
      const jsm = await jetstreamManager(h.bus.connection);
      const tasksBefore = (await jsm.streams.info('TASKS')).state.messages;
      await expect(
        rpc.sendMessage({
          ...send([text('a note, never started')]),
          configuration: {
            acceptedOutputModes: [],
            taskPushNotificationConfig: TaskPushNotificationConfig.fromJSON({
              url: receiver.url,
              token: 'a\r\nX-Injected: 1',
            }),
            returnImmediately: true,
          },
        }),
      ).rejects.toThrow(/line break/);
      expect((await jsm.streams.info('TASKS')).state.messages).toBe(tasksBefore);
      const sent = asTask(
        await rpc.sendMessage({
          ...send([text('a note, pushed')]),
          configuration: {
            acceptedOutputModes: [],
            taskPushNotificationConfig: TaskPushNotificationConfig.fromJSON({
              url: `${receiver.url}?config=send`,
              token: 'send-token',
            }),
            returnImmediately: false,
          },
        }),
      );
      await receivedState(sent.id, 'TASK_STATE_COMPLETED');
      expect(bodiesOf(sent.id)).toEqual(await expectedBodies(sent.id, 'demo', sent.contextId));
      expect(receiver.received.find((r) => r.path.endsWith('config=send'))?.headers).toMatchObject({
        'x-a2a-notification-token': 'send-token',
      });
    } finally {
      await open.stop();
    }
  }, 90_000);

  it('goes on delivering across a restart of the NATS server', async () => {
    const pusher = await pushGateway();
    try {
      await configFor('gated-nats');
      await submit('gated', 'gated-nats');
      await receivedState('gated-nats', 'TASK_STATE_INPUT_REQUIRED');
      await h.nats.restart();
      // The gateway's own requests wait out the reconnect.
      await vi.waitFor(() => approvePending('gated-nats'), { timeout: 30_000, interval: 500 });
      await h.finalOf('gated-nats');
      await receivedState('gated-nats', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('gated-nats')).toEqual(await expectedBodies('gated-nats', 'gated'));
    } finally {
      await pusher.close();
    }
  });

  // Last: it stops the harness's coordinator.
  it('goes on delivering across a coordinator restart', async () => {
    const pusher = await pushGateway();
    let coordinator: Awaited<ReturnType<typeof startSecondCoordinator>> | undefined;
    try {
      await configFor('gated-coordinator');
      await submit('gated', 'gated-coordinator');
      await receivedState('gated-coordinator', 'TASK_STATE_INPUT_REQUIRED');
      await h.coordinator.stop();
      await approvePending('gated-coordinator');
      coordinator = await startSecondCoordinator(h, ['gated.yaml']);
      await h.finalOf('gated-coordinator');
      await receivedState('gated-coordinator', 'TASK_STATE_COMPLETED');
      expect(bodiesOf('gated-coordinator')).toEqual(await expectedBodies('gated-coordinator', 'gated'));
    } finally {
      await pusher.close();
      await coordinator?.stop();
    }
  });
});

/** The official A2A client of a pipeline on a gateway that asks no token. */
function sdkClient(gatewayUrl: string, pipeline: string, binding: 'JSONRPC' | 'HTTP+JSON'): Promise<Client> {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory(), new RestTransportFactory()],
      preferredTransports: [binding],
    }),
  );
  return factory.createFromUrl(`${gatewayUrl}/a2a/${pipeline}/`);
}
