import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { subjects } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, startTroupe } from './support/cli.ts';
import { fixturePath } from './support/harness.ts';

/**
 * A coordinator that hosts its agents, with room for one step of its own at a time in-process, beside a
 * `troupe worker` serving the same agents: 20 tasks at once, each recording a line in its workspace (on the disk
 * of whichever process ran its first step), so both are seen taking steps, and fewer step requests go on NATS
 * than steps run.
 */
describe('the local hop beside a worker', () => {
  let nats: TestNats;
  let bus: NatsBus;
  let coordinator: Coordinator;
  let worker: CliProcess;
  let client: NatsConnection;
  let workspaceRoot: string;
  let workerHome: string;
  const stepRequests: string[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-hop-ws-'));
    workerHome = await mkdtemp(join(tmpdir(), 'troupe-hop-worker-'));
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    bus = await NatsBus.connect({ servers: nats.url, name: 'test-coordinator', logger });
    const registry = builtinTools();
    const pipeline = await loadPipeline(fixturePath('clustered.yaml'), { toolNames: registry.names() });
    coordinator = await startCoordinator({
      bus,
      pipelines: [pipeline],
      logger,
      workspaceRoot,
      registry,
      concurrency: 20,
      maxLocalSteps: 1,
    });
    worker = startTroupe([
      'worker',
      fixturePath('clustered.yaml'),
      '--server',
      nats.url,
      '--home',
      workerHome,
    ]);
    await worker.waitFor(/serving/, 60_000);
    client = await connect({ servers: nats.url, name: 'test-user' });
    client.subscribe(`${subjects.agent('clustered', '*')}`, {
      callback: (_error, msg) => {
        stepRequests.push(msg.subject);
      },
    });
    await client.flush();
  }, 120_000);
  afterAll(async () => {
    await worker?.stop();
    await coordinator?.stop();
    await bus?.close();
    await client?.close();
    await nats?.stop();
    await rm(workspaceRoot, { recursive: true, force: true });
    await rm(workerHome, { recursive: true, force: true });
  });

  it('runs steps in-process up to maxLocalSteps and sends the overflow to the worker, which takes some', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `hop-${i}`);
    const js = jetstream(client);
    const finals = new Map<string, string>();
    client.subscribe('troupe.events.clustered.*.task.*', {
      callback: (_error, msg) => {
        const event = msg.json<{ taskId: string; kind: string }>();
        if (['task.completed', 'task.failed', 'task.cancelled'].includes(event.kind))
          finals.set(event.taskId, event.kind);
      },
    });
    await client.flush();
    await Promise.all(
      ids.map((id) =>
        js.publish(subjects.task('clustered'), JSON.stringify({ id, goal: 'record it' }), { msgID: id }),
      ),
    );
    await expect.poll(() => finals.size, { timeout: 90_000, interval: 200 }).toBe(20);
    expect([...finals.values()].every((kind) => kind === 'task.completed')).toBe(true);
    const ledger = (root: string, id: string) => existsSync(join(root, 'clustered', id, 'ledger.txt'));
    const here = ids.filter((id) => ledger(workspaceRoot, id));
    const there = ids.filter((id) => ledger(join(workerHome, 'workspaces'), id));
    // Each task's first step ran on one of the two, once.
    expect(here.length + there.length).toBe(20);
    expect(here.filter((id) => there.includes(id))).toEqual([]);
    expect(here.length).toBeGreaterThan(0);
    expect(there.length).toBeGreaterThan(0);
    // 40 steps ran; those run in-process sent no request.
    expect(stepRequests.length).toBeGreaterThan(0);
    expect(stepRequests.length).toBeLessThan(40);
  }, 120_000);
});
