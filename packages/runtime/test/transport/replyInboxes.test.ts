import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReplyMessage } from '../../src/transport/bus.ts';
import { type EmbeddedNats, startNatsServer } from '../../src/transport/embeddedNats.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { TransportError } from '../../src/transport/transportError.ts';
import { captureLogger, startServer } from './natsFixture.ts';

/** The subscriptions a nats.js connection holds: what each costs its process is what this test counts. */
const subscriptionsOf = (connection: NatsConnection): number =>
  (
    connection as unknown as { protocol: { subscriptions: { size(): number } } }
  ).protocol.subscriptions.size();

const text = (reply: ReplyMessage): string =>
  reply.ok ? new TextDecoder().decode(reply.data) : reply.error.code;

describe('requests answered many times, on one subscription per connection', () => {
  let server: EmbeddedNats;
  let requester: NatsBus;
  let responder: NatsBus;
  /** The requests the responder got, by payload, with the inbox each asked to be answered on. */
  const asked = new Map<string, string>();

  beforeAll(async () => {
    server = await startServer({ jetstream: false });
    requester = await NatsBus.connect({
      servers: server.url,
      name: 'requester',
      logger: captureLogger().logger,
    });
    responder = await NatsBus.connect({
      servers: server.url,
      name: 'responder',
      logger: captureLogger().logger,
    });
    responder.subscribeText('troupe.test.many', (delivery) => {
      if (delivery.reply) asked.set(JSON.parse(delivery.value) as string, delivery.reply);
    });
    await responder.flush();
  });
  afterAll(async () => {
    await requester?.close();
    await responder?.close();
    await server?.stop();
  });

  it('waits for a hundred requests on one subscription, each hearing only its own answers on an inbox of its own', async () => {
    const before = subscriptionsOf(requester.connection);
    const heard = new Map<number, string[]>();
    const stops = Array.from({ length: 100 }, (_, n) => {
      heard.set(n, []);
      return requester.requestReplies('troupe.test.many', `r${n}`, (reply) =>
        heard.get(n)?.push(text(reply)),
      );
    });
    await expect.poll(() => asked.size).toBe(100);
    expect(subscriptionsOf(requester.connection) - before).toBe(1);
    // Unguessable from one another: the inboxes share their connection's part, and differ in a random one.
    const inboxes = [...asked.values()];
    expect(new Set(inboxes).size).toBe(100);
    expect(new Set(inboxes.map((inbox) => inbox.slice(0, inbox.lastIndexOf('.')))).size).toBe(1);
    expect(inboxes.every((inbox) => /\.steps\.[0-9a-f]{32}\.[0-9a-f]{32}$/.test(inbox))).toBe(true);

    for (const n of [3, 50, 99]) {
      const inbox = asked.get(`r${n}`) as string;
      responder.publish(inbox, { heartbeat: n });
      responder.publish(inbox, { done: n });
    }
    await expect.poll(() => heard.get(99)?.length).toBe(2);
    expect(heard.get(3)).toEqual(['{"heartbeat":3}', '{"done":3}']);
    expect(heard.get(50)).toEqual(['{"heartbeat":50}', '{"done":50}']);
    expect([...heard.values()].filter((answers) => answers.length > 0)).toHaveLength(3);
    for (const stop of stops) stop();
    expect(subscriptionsOf(requester.connection) - before).toBe(1);
  });

  it('answers a heartbeat to the inbox of a request that ended "no responders", as the server does where nobody listens', async () => {
    const stop = requester.requestReplies('troupe.test.many', 'ended', () => {});
    await expect.poll(() => asked.has('ended')).toBe(true);
    const inbox = asked.get('ended') as string;
    expect(await responder.stillListening(inbox, { heartbeat: true }, 300)).toBe('unanswered');
    stop();
    expect(await responder.stillListening(inbox, { heartbeat: true }, 1_000)).toBe('gone');
  });

  it('answers only on an inbox: a reply subject that acts when published to gets nothing, from the bus or its acks', async () => {
    const stop = requester.requestReplies('troupe.test.many', 'victim', () => {});
    await expect.poll(() => asked.has('victim')).toBe(true);
    const ended = asked.get('victim') as string;
    stop();
    const peer = await connect({ servers: server.url, name: 'peer' });
    try {
      const heard: string[] = [];
      for (const subject of ['troupe.test.victim', '_INBOX.peer.probe'])
        peer.subscribe(subject, { callback: (_error, msg) => void heard.push(msg.subject) });
      await peer.flush();
      // In order on one connection: were the first answered, it would be heard before the second.
      peer.publish(ended, '{"heartbeat":true}', { reply: 'troupe.test.victim' });
      peer.publish(ended, '{"heartbeat":true}', { reply: '_INBOX.peer.probe' });
      await expect.poll(() => heard).toEqual(['_INBOX.peer.probe']);
      requester.acknowledge('troupe.test.victim');
      requester.acknowledge('_INBOX.peer.probe');
      await expect.poll(() => heard).toEqual(['_INBOX.peer.probe', '_INBOX.peer.probe']);
    } finally {
      await peer.close();
    }
  });

  it('fails a request nobody serves with no_responders, naming its subject', async () => {
    const failures: unknown[] = [];
    requester.requestReplies('troupe.test.nobody', {}, (reply) => {
      if (!reply.ok) failures.push(reply.error);
    });
    await expect.poll(() => failures.length).toBe(1);
    expect(TransportError.is(failures[0], 'no_responders')).toBe(true);
    expect((failures[0] as Error).message).toContain('troupe.test.nobody');
  });

  it('fails every request waiting when the inbox subscription is refused, and subscribes again for the next', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-inboxes-'));
    // Allowed to send anywhere, and to read nats.js's own inboxes, but none of the step inboxes.
    const configFile = join(dir, 'server.conf');
    await writeFile(
      configFile,
      'authorization { users = [ { user: "u", password: "p", permissions: { publish: { allow: [">"] }, subscribe: { allow: ["_INBOX.>", "troupe.test.>"] } } } ] }\n',
    );
    const limited = await startNatsServer({ dataDir: dir, jetstream: false, configFile });
    const { logger, lines } = captureLogger();
    const bus = await NatsBus.connect({
      servers: limited.url,
      name: 'refused',
      logger,
      access: { user: 'u', password: 'p' },
    });
    try {
      const failures: unknown[] = [];
      const fail = (reply: ReplyMessage) => void (reply.ok ? undefined : failures.push(reply.error));
      bus.requestReplies('troupe.test.refused', {}, fail);
      bus.requestReplies('troupe.test.refused', {}, fail);
      await expect.poll(() => failures.length).toBe(2);
      bus.requestReplies('troupe.test.refused', {}, fail);
      await expect.poll(() => failures.length).toBe(3);
      expect(failures.every((error) => TransportError.is(error, 'request_failed'))).toBe(true);
      expect((failures[0] as Error).message).toMatch(
        /^request to troupe\.test\.refused failed: .*[Pp]ermission/,
      );
      expect(lines.filter((line) => line.msg === 'the subscription for step replies failed')).toHaveLength(2);
    } finally {
      await bus.close();
      await limited.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('a heartbeat request of nats.js to an ended request of a bus', () => {
  it('fails with nats.js own no-responders error, which is how a host of an earlier release tells its requester gone', async () => {
    const server = await startServer({ jetstream: false });
    const bus = await NatsBus.connect({
      servers: server.url,
      name: 'requester',
      logger: captureLogger().logger,
    });
    const host = await connect({ servers: server.url });
    let inbox = '';
    host.subscribe('troupe.test.old', {
      callback: (_error, msg) => {
        inbox = msg.reply ?? '';
      },
    });
    await host.flush();
    const stop = bus.requestReplies('troupe.test.old', {}, () => {});
    await expect.poll(() => inbox).not.toBe('');
    stop();
    const error = await host
      .request(inbox, '{"heartbeat":true}', { timeout: 1_000 })
      .catch((e: unknown) => e);
    expect((error as { isNoResponders?: () => boolean }).isNoResponders?.()).toBe(true);
    await host.close();
    await bus.close();
    await server.stop();
  });
});
