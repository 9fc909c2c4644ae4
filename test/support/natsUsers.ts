import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection, nkeyAuthenticator } from '@nats-io/transport-node';
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
