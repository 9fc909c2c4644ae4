import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, type Logger } from '../../src/logging/logger.ts';
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

export type LogLine = Record<string, unknown> & { level: number; msg: string };

/** A JSON logger whose lines land in `lines`, parsed. */
export function captureLogger(level = 'debug'): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = createLogger({
    level,
    name: 'test',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) },
  });
  return { logger, lines };
}

/** Resolves once `predicate` holds, polling; fails the test after `timeoutMs`. */
export async function eventually(predicate: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
