import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { connect, type NatsConnection, nkeyAuthenticator } from '@nats-io/transport-node';
import { eventsOf, subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { cliEnv, troupe } from './cli.ts';

/** The servers a test runs on twice: an open one, and one whose users `troupe nats-config` wrote (`users`). */
export const SERVERS = [
  { server: 'an open server', users: false },
  { server: 'a server where every part logs in as its own user', users: true },
] as const;

/** The users `troupe nats-config` wrote: the server's `authorization` block, and each user's seed and settings. */
export interface NatsUsers {
  /** The block to start a nats-server with. */
  config: string;
  /** What the command said it wrote. */
  summary: string;
  /** The environment a `troupe` process runs with as `user` against `url`, from the user's .env file. */
  env(user: string, url: string): Promise<NodeJS.ProcessEnv>;
  /** A raw connection as `user` to `servers`, on its own inbox prefix. */
  connect(user: string, servers: string | string[], name?: string): Promise<NatsConnection>;
  remove(): Promise<void>;
}

/** Runs `troupe nats-config <args> --out <a new directory>` and reads back what it wrote. */
export async function writeNatsUsers(args: string[]): Promise<NatsUsers> {
  const dir = await mkdtemp(join(tmpdir(), 'troupe-users-'));
  const written = await troupe(['nats-config', ...args, '--out', dir]);
  if (written.code !== 0) throw new Error(`troupe nats-config failed: ${written.stderr}`);
  return {
    config: await readFile(join(dir, 'troupe-auth.conf'), 'utf8'),
    summary: written.stdout,
    async env(user, url) {
      const lines = (await readFile(join(dir, `${user}.env`), 'utf8')).split('\n');
      const vars = Object.fromEntries(
        lines
          .filter((l) => l.includes('='))
          .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
      );
      return cliEnv({ ...vars, NATS_URL: url });
    },
    async connect(user, servers, name = `test-${user}`) {
      const seed = (await readFile(join(dir, `${user}.nk`), 'utf8')).trim();
      return connect({
        servers,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
        inboxPrefix: `troupe._inbox.${user}`,
        name,
      });
    },
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/** A server for a kill -9 test, the environments of its parts, and the test's own client on it. */
export interface KillTestServer {
  nats: TestNats;
  /** The test's client: a coordinator's user on a server with users. */
  client: NatsConnection;
  /** What a coordinator, the test's own `troupe` commands and the person answering run with. */
  env: { coordinator: NodeJS.ProcessEnv; harness: NodeJS.ProcessEnv; approver: NodeJS.ProcessEnv };
  /** Every task event the client heard, in order. */
  events: TroupeEvent[];
  stop(): Promise<void>;
}

/**
 * Starts a nats-server for a kill -9 test of `pipelineFile`: open, or with the users `troupe nats-config` writes for
 * it (`coordinator`, `harness` — a second coordinator, the test's own — and `ana`, who approves for it). The test's
 * client records every task event, calling `heard` after each.
 */
export async function startKillTestServer(
  pipelineFile: string,
  withUsers: boolean,
  name: string,
  heard: () => void,
): Promise<KillTestServer> {
  const pipeline = basename(pipelineFile, '.yaml');
  const users = withUsers
    ? await writeNatsUsers([
        pipelineFile,
        '--coordinator',
        'coordinator',
        '--coordinator',
        'harness',
        '--approver',
        `ana=${pipeline}`,
      ])
    : undefined;
  const nats = await startTestNats(users ? { config: users.config } : {});
  const env = users
    ? {
        coordinator: await users.env('coordinator', nats.url),
        harness: await users.env('harness', nats.url),
        approver: await users.env('ana', nats.url),
      }
    : { coordinator: cliEnv(), harness: cliEnv(), approver: cliEnv() };
  const client = users
    ? await users.connect('harness', nats.url, name)
    : await connect({ servers: nats.url, name });
  const events: TroupeEvent[] = [];
  client.subscribe(subjects.allTaskEvents, {
    callback: (_error, msg) => {
      // One event, or a batch of them (event batching, the default).
      const parsed = eventsOf(msg.data, msg.subject);
      if (!parsed.ok) throw new Error(parsed.reason);
      events.push(...parsed.value);
      heard();
    },
  });
  await client.flush();
  return {
    nats,
    client,
    env,
    events,
    async stop() {
      await client.close();
      await nats.stop();
      await users?.remove();
    },
  };
}
