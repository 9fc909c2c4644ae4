import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { requestWithHeartbeats } from '../../src/transport/heartbeatRequest.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, type LogLine, startServer } from './natsFixture.ts';

const Reply = z.object({ done: z.literal(true) });
const Heartbeat = z.strictObject({ heartbeat: z.literal(true) });

/**
 * A responder in another process: heartbeats every 50 ms for each request, until the test publishes on
 * `troupe.test.release`; then the reply.
 */
const RESPONDER = `
const { connect } = require('@nats-io/transport-node');
connect({ servers: process.argv[1] }).then((nc) => {
  const working = new Set();
  nc.subscribe('troupe.test.slow', {
    callback: (_e, msg) => {
      const beat = setInterval(() => msg.respond(JSON.stringify({ heartbeat: true })), 50);
      working.add(() => { clearInterval(beat); msg.respond(JSON.stringify({ done: true })); });
    },
  });
  nc.subscribe('troupe.test.release', {
    callback: () => { for (const finish of working) finish(); working.clear(); },
  });
  nc.flush().then(() => console.log('ready'));
});
`;

describe('requestWithHeartbeats on a busy requester', () => {
  let server: EmbeddedNats;
  let bus: NatsBus;
  let responder: ChildProcess;
  let lines: LogLine[];

  beforeAll(async () => {
    server = await startServer();
    const captured = captureLogger('trace');
    lines = captured.lines;
    bus = await NatsBus.connect({ servers: server.url, name: 'busy-requester', logger: captured.logger });
    responder = spawn(process.execPath, ['-e', RESPONDER, server.url], {
      cwd: join(import.meta.dirname, '..', '..', '..', '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve) => responder.stdout?.on('data', () => resolve()));
  });
  afterAll(async () => {
    responder?.kill('SIGKILL');
    await bus?.close();
    await server?.stop();
  });

  it('reads the heartbeats that arrived while it was busy before calling the responder silent', async () => {
    let heard: () => void = () => {};
    const firstHeartbeat = new Promise<void>((resolve) => (heard = resolve));
    const pending = requestWithHeartbeats(bus, 'troupe.test.slow', {}, Reply, Heartbeat, {
      timeoutMs: 20_000,
      idleMs: 300,
      onHeartbeat: () => heard(),
    });
    await firstHeartbeat;
    // This thread is busy for longer than the idle limit; the responder's heartbeats wait in the socket. When the
    // thread is free, the overdue idle timer runs before they are read.
    const until = Date.now() + 800;
    while (Date.now() < until) {
      // busy on purpose
    }
    bus.connection.publish('troupe.test.release');
    await expect(pending).resolves.toEqual({ done: true });
  });

  it('logs the heartbeats at trace and the reply at the message level, from the responder to the workflow', async () => {
    lines.length = 0;
    const step = { taskId: 't-hb', from: 'workflow', to: 'planner', kind: 'agent.step' };
    const pending = requestWithHeartbeats(bus, 'troupe.test.slow', {}, Reply, Heartbeat, {
      timeoutMs: 20_000,
      idleMs: 1_000,
      meta: step,
    });
    const heard = () =>
      lines.filter((l) => l.dir === 'in' && l.taskId === 't-hb' && l.kind === 'step.heartbeat');
    await expect.poll(() => heard().length).toBeGreaterThan(5);
    bus.connection.publish('troupe.test.release');
    await pending;
    const received = lines.filter((l) => l.dir === 'in' && l.taskId === 't-hb');
    const heartbeats = received.filter((l) => l.kind === 'step.heartbeat');
    expect(heartbeats.length).toBeGreaterThan(5);
    expect(heartbeats.every((l) => l.level === 10 && l.from === 'planner' && l.to === 'workflow')).toBe(true);
    expect(received.filter((l) => l.kind !== 'step.heartbeat')).toEqual([
      expect.objectContaining({ level: 30, from: 'planner', to: 'workflow', kind: 'agent.reply' }),
    ]);
  });
});
