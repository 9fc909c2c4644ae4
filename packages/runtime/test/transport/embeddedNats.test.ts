import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { findFreePort, findNatsServer, startNatsServer } from '../../src/transport/embeddedNats.ts';
import { TransportError } from '../../src/transport/transportError.ts';

let dataDir: string;
const savedBin = process.env.NATS_SERVER_BIN;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'troupe-embedded-test-'));
});

afterEach(() => {
  if (savedBin === undefined) delete process.env.NATS_SERVER_BIN;
  else process.env.NATS_SERVER_BIN = savedBin;
});

afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('findNatsServer', () => {
  it('finds the installed nats-server', () => {
    delete process.env.NATS_SERVER_BIN;
    expect(findNatsServer()).toMatch(/nats-server$/);
  });

  it('trusts NATS_SERVER_BIN alone when it is set', () => {
    process.env.NATS_SERVER_BIN = '/nonexistent';
    expect(findNatsServer()).toBeUndefined();
  });
});

describe('startNatsServer', () => {
  it('explains how to get nats-server when the binary is missing', async () => {
    process.env.NATS_SERVER_BIN = '/nonexistent';
    const failure = await startNatsServer({ dataDir }).catch((e) => e);
    expect(failure).toBeInstanceOf(TransportError);
    expect(failure.code).toBe('nats_server_missing');
    expect(failure.message).toContain('NATS_SERVER_BIN is set to /nonexistent');
    expect(failure.message).toContain('nats-server was not found');
    expect(failure.message).toContain('sudo apt-get install nats-server');
    expect(failure.message).toContain('brew install nats-server');
    expect(failure.message).toContain('https://github.com/nats-io/nats-server/releases');
    expect(failure.message).toContain('set NATS_URL to use a running server');
  });

  it('starts on a free local port, accepts clients, and stops its own process', async () => {
    const server = await startNatsServer({ dataDir });
    try {
      expect(server.port).not.toBe(4222);
      expect(server.url).toBe(`nats://127.0.0.1:${server.port}`);
      expect(isAlive(server.pid)).toBe(true);
    } finally {
      await server.stop();
    }
    expect(isAlive(server.pid)).toBe(false);
    await server.stop();
  });

  it('fails with the server output when the port is taken', async () => {
    const first = await startNatsServer({ dataDir: join(dataDir, 'a') });
    try {
      const failure = await startNatsServer({ dataDir: join(dataDir, 'b'), port: first.port }).catch(
        (e) => e,
      );
      expect(failure).toBeInstanceOf(TransportError);
      expect(failure.code).toBe('nats_server_failed');
      expect(failure.message).toMatch(/exited before accepting clients/);
      expect(failure.message).toMatch(/address already in use/);
    } finally {
      await first.stop();
    }
  });

  it('finds free ports that are not the default NATS port', async () => {
    const port = await findFreePort();
    expect(port).toBeGreaterThan(0);
    expect(port).not.toBe(4222);
  });
});
