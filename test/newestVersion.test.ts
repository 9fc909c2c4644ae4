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
import { cliEnv, troupe } from './support/cli.ts';

const pipelineFile = (instructions: string) => `version: 1
name: rolling
models:
  scripted: { provider: scripted, script: ./rolling.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: ${instructions} }
flow:
  - { id: write, kind: agent, agent: writer }
`;

/** How often a coordinator reads its pipelines' registrations (`NEWEST_READ_EVERY_MS`, durability.md). */
const READ_EVERY_MS = 1_000;

/**
 * Which version new tasks start on while coordinators of several versions come and go: the newest one stored, never
 * an older one because its coordinator restarted; an older one only when an operator says so (`troupe versions use`).
 */
describe('the newest version of a pipeline', () => {
  let nats: TestNats;
  let dir: string;
  let client: NatsBus;
  const files = new Map<string, LoadedPipeline>();
  const running = new Map<string, { coordinator: Coordinator; bus: NatsBus }>();
  let submitted = 0;

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-newest-'));
    await writeFile(join(dir, 'rolling.script.yaml'), 'agents:\n  writer:\n    - content: written\n');
    for (const name of ['v1', 'v2', 'v3']) {
      const path = join(dir, `${name}.yaml`);
      await writeFile(path, pipelineFile(`Write as ${name}.`));
      files.set(name, await loadPipeline(path, { toolNames: builtinTools().names() }));
    }
    client = await NatsBus.connect({ servers: nats.url, name: 'newest-test', logger: silent() });
  });
  afterAll(async () => {
    for (const name of [...running.keys()]) await stop(name);
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const silent = () => createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
  const hashOf = (name: string) => files.get(name)?.version.hash ?? '';

  async function start(name: string, file: string, takeNewest = false): Promise<void> {
    const pipeline = files.get(file);
    if (!pipeline) throw new Error(`no file ${file}`);
    const bus = await NatsBus.connect({ servers: nats.url, name, logger: silent() });
    const coordinator = await startCoordinator({
      bus,
      pipelines: [pipeline],
      logger: silent(),
      workspaceRoot: join(dir, 'work', name),
      registry: builtinTools(),
      ...(takeNewest ? { takeNewest } : {}),
    });
    running.set(name, { coordinator, bus });
  }

  async function stop(name: string): Promise<void> {
    const started = running.get(name);
    running.delete(name);
    await started?.coordinator.stop();
    await started?.bus.close();
  }

  /** Submits `count` tasks at once and answers the versions they ran on, once each completed. */
  async function versionsOfNewTasks(count: number): Promise<(string | undefined)[]> {
    const ids = Array.from({ length: count }, () => `task-${++submitted}`);
    await Promise.all(ids.map((id) => submitTask(client, 'rolling', { id, goal: 'write' })));
    const records = await KvStore.open(client, BUCKETS.workflows, WorkflowRecord);
    const recorded = () => Promise.all(ids.map(async (id) => (await records.get(id))?.value));
    await expect
      .poll(async () => (await recorded()).filter((record) => record?.status === 'completed').length, {
        timeout: 60_000,
      })
      .toBe(count);
    return (await recorded()).map((record) => record?.version);
  }

  /** Submits a task and answers the version it ran on, once it completed. */
  async function versionOfNewTask(): Promise<string | undefined> {
    return (await versionsOfNewTasks(1))[0];
  }

  /**
   * Waits until a new task starts on `name`'s version: a coordinator that did not make the change follows it at its
   * next read of the registry, within a second (durability.md, "New tasks").
   */
  async function newTasksReach(name: string): Promise<void> {
    await expect.poll(versionOfNewTask, { timeout: 30_000, interval: 200 }).toBe(hashOf(name));
  }

  it('stays the one stored last when a coordinator of an older one restarts; an older one only when chosen', async () => {
    await start('a', 'v1');
    await start('b', 'v2');
    await newTasksReach('v2');

    // A crash-restart of the old replica mid rolling deploy: it runs v2's tasks, and new ones still start on v2.
    await stop('a');
    await start('a', 'v1');
    expect(await versionOfNewTask()).toBe(hashOf('v2'));

    // A rollback is said out loud, and holds when a coordinator of v2 restarts. It is made while b is down, so the
    // tasks that show it reached new tasks all ran on a (which followed it, not having made it).
    await stop('b');
    expect(await useVersion(client, 'rolling', hashOf('v1').slice(0, 12))).toEqual({
      from: hashOf('v2'),
      to: hashOf('v1'),
    });
    await newTasksReach('v1');
    await start('b', 'v2');
    expect(await versionOfNewTask()).toBe(hashOf('v1'));

    // A version never stored before is a deploy: it becomes the newest by starting.
    await start('c', 'v3');
    await newTasksReach('v3');

    // The command line does the same, and says what it changed.
    const used = await troupe(
      ['versions', 'use', 'rolling', hashOf('v2').slice(0, 12), '--server', nats.url],
      cliEnv(),
    );
    expect(used.stderr).toBe('');
    expect(used.stdout).toBe(
      `rolling: new tasks start on version ${hashOf('v2').slice(0, 12)} (was ${hashOf('v3').slice(0, 12)})\n`,
    );
    expect(used.code).toBe(0);
    await newTasksReach('v2');
    const unknown = await troupe(['versions', 'use', 'rolling', 'ffffff', '--server', nats.url], cliEnv());
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('no stored version of pipeline rolling starts with ffffff');

    // A troupe up on its own embedded server takes its file's version, whatever came before: an edit undone by hand
    // is back in use at the restart.
    for (const name of [...running.keys()]) await stop(name);
    await start('alone', 'v1', true);
    expect(await versionOfNewTask()).toBe(hashOf('v1'));
  }, 120_000);

  it('is read by each coordinator about once a second, not once per task, and followed from there', async () => {
    for (const name of [...running.keys()]) await stop(name);
    // v2 stored, for the rollback below, and v1 the newest, taken by the one coordinator left.
    await start('b', 'v2');
    await stop('b');
    await start('a', 'v1', true);
    // Every read of the registration there is: a direct get, or one through the stream's API.
    const reads: number[] = [];
    const count = () => void reads.push(performance.now());
    const direct = client.subscribeText(`$JS.API.DIRECT.GET.KV_${BUCKETS.pipelines}.>`, count);
    const throughApi = client.subscribeText(`$JS.API.STREAM.MSG.GET.KV_${BUCKETS.pipelines}`, count);
    await client.flush();
    try {
      const began = performance.now();
      const tasks = 40;
      expect(new Set(await versionsOfNewTasks(tasks))).toEqual(new Set([hashOf('v1')]));
      const took = performance.now() - began;
      // One read a second in the background (and one the start may have under way), however many tasks came.
      expect(reads.length).toBeLessThanOrEqual(Math.floor(took / READ_EVERY_MS) + 1);
      expect(reads.length).toBeLessThan(tasks);
    } finally {
      direct.unsubscribe();
      throughApi.unsubscribe();
    }

    // A rollback from outside reaches the only coordinator there is, which made no change itself, and then holds.
    expect(await useVersion(client, 'rolling', hashOf('v2').slice(0, 12))).toEqual({
      from: hashOf('v1'),
      to: hashOf('v2'),
    });
    await newTasksReach('v2');
    expect(new Set(await versionsOfNewTasks(5))).toEqual(new Set([hashOf('v2')]));
  }, 120_000);
});
