import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { submitTask } from '@troupe/client';
import {
  builtinTools,
  type Coordinator,
  type LoadedPipeline,
  loadPipeline,
  startCoordinator,
  useVersion,
} from '@troupe/coordinator';
import { BUCKETS, WorkflowRecord } from '@troupe/protocol';
import { createLogger, KvStore, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const pipelineFile = (instructions: string) => `version: 1
name: copied
models:
  scripted: { provider: scripted, script: ./copied.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: ${instructions} }
flow:
  - { id: write, kind: agent, agent: writer }
`;

/** How often a coordinator reads its pipelines' registrations (`NEWEST_READ_EVERY_MS`, durability.md). */
const READ_EVERY_MS = 1_000;

/**
 * A coordinator keeps a copy of the version its pipeline's registration names newest and starts new tasks from it:
 * tasks cost no read of the registry, and a version chosen elsewhere (`troupe versions use`, another coordinator's
 * start) still reaches them.
 */
describe("the registry's newest version, copied by each coordinator", () => {
  let nats: TestNats;
  let dir: string;
  let client: NatsBus;
  let records: KvStore<typeof WorkflowRecord>;
  const files = new Map<string, LoadedPipeline>();
  const running = new Map<string, { coordinator: Coordinator; bus: NatsBus }>();
  let submitted = 0;

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-newest-copy-'));
    await writeFile(join(dir, 'copied.script.yaml'), 'agents:\n  writer:\n    - content: written\n');
    for (const name of ['v1', 'v2']) {
      const path = join(dir, `${name}.yaml`);
      await writeFile(path, pipelineFile(`Write as ${name}.`));
      files.set(name, await loadPipeline(path, { toolNames: builtinTools().names() }));
    }
    client = await NatsBus.connect({ servers: nats.url, name: 'newest-copy-test', logger: silent() });
  });
  afterAll(async () => {
    for (const name of [...running.keys()]) await stop(name);
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const silent = () => createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
  const hashOf = (name: string) => files.get(name)?.version.hash ?? '';

  async function start(name: string, file: string): Promise<void> {
    const pipeline = files.get(file);
    if (!pipeline) throw new Error(`no file ${file}`);
    const bus = await NatsBus.connect({ servers: nats.url, name, logger: silent() });
    const coordinator = await startCoordinator({
      bus,
      pipelines: [pipeline],
      logger: silent(),
      workspaceRoot: join(dir, 'work', name),
      registry: builtinTools(),
    });
    running.set(name, { coordinator, bus });
    records = await KvStore.open(client, BUCKETS.workflows, WorkflowRecord);
  }

  async function stop(name: string): Promise<void> {
    const started = running.get(name);
    running.delete(name);
    await started?.coordinator.stop();
    await started?.bus.close();
  }

  /** Submits `count` tasks at once and waits until each has completed; answers the versions they ran on. */
  async function runTasks(count: number): Promise<(string | undefined)[]> {
    const ids = Array.from({ length: count }, () => `task-${++submitted}`);
    await Promise.all(ids.map((id) => submitTask(client, 'copied', { id, goal: 'write' })));
    const versions = async () => Promise.all(ids.map(async (id) => (await records.get(id))?.value));
    await expect
      .poll(async () => (await versions()).filter((r) => r?.status === 'completed').length, {
        timeout: 60_000,
      })
      .toBe(count);
    return (await versions()).map((record) => record?.version);
  }

  it('reads the registry once a second whatever the number of tasks, never once per task', async () => {
    await start('a', 'v1');
    // Every read of the registration there is: a direct get, or one through the stream's API.
    const reads: number[] = [];
    const count = () => void reads.push(performance.now());
    const direct = client.subscribeText(`$JS.API.DIRECT.GET.KV_${BUCKETS.pipelines}.>`, count);
    const throughApi = client.subscribeText(`$JS.API.STREAM.MSG.GET.KV_${BUCKETS.pipelines}`, count);
    await client.flush();
    try {
      const began = performance.now();
      const tasks = 40;
      expect(new Set(await runTasks(tasks))).toEqual(new Set([hashOf('v1')]));
      const took = performance.now() - began;
      // One read a second in the background (and one the start may have under way), however many tasks came.
      expect(reads.length).toBeLessThanOrEqual(Math.floor(took / READ_EVERY_MS) + 1);
      expect(reads.length).toBeLessThan(tasks);
    } finally {
      direct.unsubscribe();
      throughApi.unsubscribe();
    }
  }, 90_000);

  it('follows a version chosen elsewhere: another coordinator that starts, then troupe versions use', async () => {
    // Another coordinator starts with a version stored for the first time: a deploy. It goes, and `a` takes on its
    // version, read from the bucket, within a second of the registration.
    await start('b', 'v2');
    await stop('b');
    await expect
      .poll(async () => (await runTasks(1))[0], { timeout: 30_000, interval: 200 })
      .toBe(hashOf('v2'));

    // A rollback, from outside any coordinator.
    expect(await useVersion(client, 'copied', hashOf('v1').slice(0, 12))).toEqual({
      from: hashOf('v2'),
      to: hashOf('v1'),
    });
    await expect
      .poll(async () => (await runTasks(1))[0], { timeout: 30_000, interval: 200 })
      .toBe(hashOf('v1'));
    // Once followed, it holds: every new task starts on it.
    expect(new Set(await runTasks(5))).toEqual(new Set([hashOf('v1')]));
  }, 120_000);
});
