import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EmbeddedNats, startNatsServer } from '../../src/transport/embeddedNats.ts';

/** A nats-server on a free port with its own temp dir; `stop()` removes both. */
export async function startServer(opts: { jetstream?: boolean } = {}): Promise<EmbeddedNats> {
  const dataDir = await mkdtemp(join(tmpdir(), 'troupe-transport-test-'));
  const server = await startNatsServer({ dataDir, jetstream: opts.jetstream ?? true });
  return {
    ...server,
    stop: async () => {
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export { captureLogger, type LogLine } from '@troupe/testkit';

/** Resolves once `predicate` holds, polling; fails the test after `timeoutMs`. */
export async function eventually(predicate: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
