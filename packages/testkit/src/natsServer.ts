import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EmbeddedNats, startNatsServer } from '@troupe/runtime';

/** A throw-away nats-server for a test: JetStream on, a free port on 127.0.0.1, a fresh temp data dir. */
export interface TestNats extends EmbeddedNats {
  /** Stops the server and starts it again on the same port and data dir, as a crash-and-restart would. */
  restart(): Promise<void>;
  /** Stops the server but keeps its port and data dir, for an outage that lasts until {@link resume}. */
  pause(): Promise<void>;
  /** Starts a paused server again on the same port and data dir; does nothing when it is running. */
  resume(): Promise<void>;
}

export interface TestNatsOptions {
  /** Default true. */
  jetstream?: boolean;
  /** nats-server configuration (users and permissions, TLS), written to a file in the data dir. */
  config?: string;
}

/**
 * Starts a nats-server for a test. `stop()` ends it and deletes its data dir; call it in `afterAll`.
 *
 * @example
 * let nats: TestNats;
 * beforeAll(async () => { nats = await startTestNats(); });
 * afterAll(() => nats.stop());
 */
export async function startTestNats(opts: TestNatsOptions = {}): Promise<TestNats> {
  const dataDir = await mkdtemp(join(tmpdir(), 'troupe-nats-'));
  const jetstream = opts.jetstream ?? true;
  const configFile = opts.config === undefined ? undefined : join(dataDir, 'nats-server.conf');
  if (configFile !== undefined) await writeFile(configFile, opts.config as string);
  // One name for the server's life, restarts included: a cluster knows its nodes by name.
  const serverName = `troupe-test-${randomBytes(6).toString('hex')}`;
  const launch = { serverName, ...(configFile === undefined ? {} : { configFile }) };
  let server: EmbeddedNats;
  try {
    server = await startNatsServer({ dataDir, jetstream, ...launch });
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  const { url, port } = server;
  let running = true;
  const pause = async (): Promise<void> => {
    if (running) await server.stop();
    running = false;
  };
  const resume = async (): Promise<void> => {
    if (running) return;
    server = await startNatsServer({ dataDir, jetstream, port, ...launch });
    running = true;
  };
  return {
    url,
    port,
    dataDir,
    get pid() {
      return server.pid;
    },
    pause,
    resume,
    async restart() {
      await pause();
      await resume();
    },
    async stop() {
      await pause();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
