import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AgentStepRequest,
  PipelineVersion,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { agentDefinitions } from '../src/config/agentDefinitions.ts';
import { builtinTools } from '../src/config/builtinTools.ts';
import { loadPipeline, loadStoredVersion } from '../src/config/loadPipeline.ts';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { versionHash } from '../src/config/pipelineVersion.ts';
import { PipelineVersions } from '../src/config/pipelineVersions.ts';
import { pruneVersions } from '../src/config/versionRetention.ts';
import { type PipelineRunner, startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const toolNames = builtinTools().names();

const raw = {
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: { planner: { instructions: 'Plan.' }, executor: { instructions: 'Do.' } },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'execute', kind: 'agent', agent: 'executor' },
  ],
};
const v1 = PipelineConfig.parse(raw);
/** The same pipeline edited: the executor renamed, its step removed, a review step added. */
const v2 = PipelineConfig.parse({
  ...raw,
  agents: { planner: { instructions: 'Plan better.' }, doer: { instructions: 'Do.' } },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'check', kind: 'agent', agent: 'doer' },
  ],
});
const v1Hash = versionHash(v1, {});
const v2Hash = versionHash(v2, {});

describe('a pipeline version', () => {
  it('is the same for the same content in another key order, and another for any change', () => {
    const reordered = PipelineConfig.parse({
      flow: raw.flow,
      agents: { executor: { instructions: 'Do.' }, planner: { instructions: 'Plan.' } },
      defaults: raw.defaults,
      models: raw.models,
      name: 'unit',
      version: 1,
    });
    expect(versionHash(reordered, {})).toBe(v1Hash);
    expect(v1Hash).toMatch(/^[0-9a-f]{64}$/);
    const prompt = PipelineConfig.parse({
      ...raw,
      agents: { ...raw.agents, planner: { instructions: 'Plan!' } },
    });
    expect(versionHash(prompt, {})).not.toBe(v1Hash);
    // A script is part of the version: a changed reply is a changed pipeline.
    expect(versionHash(v1, { './unit.script.yaml': 'a' })).not.toBe(
      versionHash(v1, { './unit.script.yaml': 'b' }),
    );
  });

  it('holds the files its config refers to, so it loads without them', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-version-'));
    try {
      await writeFile(join(dir, 'unit.script.yaml'), 'agents:\n  planner:\n    - content: A plan.\n');
      await writeFile(join(dir, 'unit.yaml'), JSON.stringify(raw));
      const loaded = await loadPipeline(join(dir, 'unit.yaml'), { toolNames });
      expect(Object.keys(loaded.version.files)).toEqual(['./unit.script.yaml']);
      expect(loaded.version.hash).toBe(versionHash(loaded.config, loaded.version.files));
      // Stored and read back, with the file gone: its agents are the file's, their model plays the same script.
      const stored = PipelineVersion.parse(JSON.parse(JSON.stringify(loaded.version)));
      await rm(dir, { recursive: true, force: true });
      const again = await loadStoredVersion(stored, 'pipeline unit version x', { requireKeys: true });
      expect(again.config).toEqual(loaded.config);
      expect(agentDefinitions(again).map((a) => [a.name, a.instructions])).toEqual(
        agentDefinitions(loaded).map((a) => [a.name, a.instructions]),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('is stored under its pipeline and hash, again at each start keeping when it was first stored, and read back', async () => {
    const kv = new MemoryKv(PipelineVersion);
    const versions = new PipelineVersions(kv);
    const version = {
      pipeline: 'unit',
      hash: v1Hash,
      config: v1 as unknown as Record<string, unknown>,
      files: {},
      storedAt: new Date(0).toISOString(),
    };
    await versions.save(version);
    await versions.save({ ...version, storedAt: new Date(1).toISOString() });
    expect((await kv.get(`unit.${v1Hash}`))?.value.storedAt).toBe(new Date(1).toISOString());
    expect(await new PipelineVersions(kv).get('unit', v1Hash)).toEqual({
      ...version,
      storedAt: new Date(1).toISOString(),
      introducedAt: new Date(0).toISOString(),
    });
    expect(await versions.get('unit', v2Hash)).toBeUndefined();
    expect(await versions.hashes('unit')).toEqual([v1Hash]);
  });
});

describe('storing a version', () => {
  it('says which version of which pipeline, and how big, when the server refuses it', async () => {
    const kv = new MemoryKv(PipelineVersion);
    kv.put = async () => {
      throw new Error('maximum payload exceeded');
    };
    const version = {
      pipeline: 'unit',
      hash: v1Hash,
      config: v1 as unknown as Record<string, unknown>,
      files: { './unit.script.yaml': 'x'.repeat(2_000) },
      storedAt: new Date(0).toISOString(),
    };
    const error = await new PipelineVersions(kv).save(version).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(error?.message).toMatch(
      new RegExp(
        `^cannot store version ${v1Hash.slice(0, 12)} of pipeline unit \\(\\d+ bytes with the files it names\\) in the KV bucket versions: maximum payload exceeded$`,
      ),
    );
  });
});

describe('the retention of stored versions', () => {
  const day = 24 * 60 * 60 * 1_000;
  const now = 30 * day;
  const [own, used, old, recent] = ['a', 'b', 'c', 'd'].map((c) => c.repeat(64)) as [
    string,
    string,
    string,
    string,
  ];
  const storeIn = (versions: PipelineVersions, pipeline: string, hash: string, daysAgo: number) =>
    versions.save({
      pipeline,
      hash,
      config: v1 as unknown as Record<string, unknown>,
      files: {},
      storedAt: new Date(now - daysAgo * day).toISOString(),
    });

  it('removes only versions past the retention that no unfinished task uses and that are not kept', async () => {
    const versions = new PipelineVersions(new MemoryKv(PipelineVersion));
    await storeIn(versions, 'unit', own, 20);
    await storeIn(versions, 'unit', used, 20);
    await storeIn(versions, 'unit', old, 20);
    await storeIn(versions, 'unit', recent, 1);
    let asked = 0;
    const removed = await pruneVersions({
      versions,
      keep: new Map([['unit', new Set([own])]]),
      inUse: async () => {
        asked += 1;
        return new Map([['unit', new Set([used])]]);
      },
      now,
      logger: createLogger({ level: 'silent' }),
    });
    expect(removed).toEqual(new Map([['unit', [old]]]));
    expect((await versions.hashes('unit')).sort()).toEqual([own, used, recent].sort());
    // Nothing to remove: the tasks' records are not read at all.
    expect(
      await pruneVersions({
        versions,
        keep: new Map([['unit', new Set([own, used])]]),
        inUse: async () => {
          asked += 1;
          return new Map();
        },
        now: now + day,
        logger: createLogger({ level: 'silent' }),
      }),
    ).toEqual(new Map());
    expect(asked).toBe(1);
  });

  it('reads the tasks once for all the pipelines of a coordinator, not once per pipeline', async () => {
    const versions = new PipelineVersions(new MemoryKv(PipelineVersion));
    for (const pipeline of ['one', 'two', 'three']) {
      await storeIn(versions, pipeline, own, 20);
      await storeIn(versions, pipeline, old, 20);
      await storeIn(versions, pipeline, used, 20);
    }
    let asked = 0;
    const removed = await pruneVersions({
      versions,
      keep: new Map(['one', 'two', 'three'].map((pipeline) => [pipeline, new Set([own])])),
      inUse: async () => {
        asked += 1;
        return new Map([
          ['one', new Set([used])],
          ['two', new Set([used, old])],
        ]);
      },
      now,
      logger: createLogger({ level: 'silent' }),
    });
    expect(asked).toBe(1);
    expect(removed).toEqual(
      new Map([
        ['one', [old]],
        ['three', [old, used]],
      ]),
    );
  });
});

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

/** Agents of both versions played by the test on one bus; each step answers unless its agent is held. */
function agentsOn(bus: MemoryBus) {
  const steps: AgentStepRequest[] = [];
  const held = new Set<string>();
  let heldStep: () => void = () => {};
  const arrived = new Promise<void>((resolve) => (heldStep = resolve));
  for (const agent of ['planner', 'executor', 'doer']) {
    bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (delivery) => {
      steps.push(delivery.value);
      if (held.has(agent)) return heldStep();
      delivery.respond({
        ok: true,
        stepId: delivery.value.stepId,
        output: `${agent} did it`,
        usage,
        turns: 1,
      });
    });
  }
  return { steps, held, arrived };
}

describe('a task of an older version', () => {
  const start = (
    parts: { bus: MemoryBus; clock: SimulatedClock; store: MemoryKv<WorkflowRecord> },
    config: PipelineConfig,
    intake: MemoryTaskIntake,
    loadVersion?: (hash: string) => Promise<PipelineConfig | undefined>,
  ) =>
    startPipelineRunner({
      ...parts,
      intake,
      config,
      version: versionHash(config, {}),
      ...(loadVersion ? { loadVersion } : {}),
      logger: createLogger({ level: 'silent' }),
      concurrency: 4,
    }).then((runner) => {
      running.push(runner);
      return runner;
    });

  /** A task of v1 whose runner stopped while it was in its `execute` step, its agent held there. */
  async function stoppedInExecute(id: string, goal: string) {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    const agents = agentsOn(bus);
    agents.held.add('executor');
    const firstIntake = new MemoryTaskIntake();
    const first = await start({ bus, clock, store }, v1, firstIntake);
    const task = firstIntake.deliver({ id, goal });
    await agents.arrived;
    await expect
      .poll(async () => (await store.get(id))?.value)
      .toMatchObject({ version: v1Hash, state: 'execute' });
    await first.stop();
    await task.handled;
    agents.held.clear();
    return { clock, bus, store, agents, task };
  }

  it('resumes on the version it started on after the pipeline changed; a new task runs on the new one', async () => {
    const { clock, bus, store, agents, task } = await stoppedInExecute('task-1', 'resume me');

    // Restarted with the edited file: the task still runs v1's flow, its done step not run again.
    const secondIntake = new MemoryTaskIntake();
    const asked: string[] = [];
    await start({ bus, clock, store }, v2, secondIntake, async (hash) => {
      asked.push(hash);
      return hash === v1Hash ? v1 : undefined;
    });
    const again = secondIntake.deliver(
      { id: 'task-1', goal: 'resume me' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await again.handled;
    expect(agents.steps.map((s) => s.stepId)).toEqual([
      'task-1.plan.1',
      'task-1.execute.1',
      'task-1.execute.1',
    ]);
    expect((await store.get('task-1'))?.value).toMatchObject({ status: 'completed', version: v1Hash });
    expect(bus.eventsOf('task.completed').find((e) => e.taskId === 'task-1')?.data).toMatchObject({
      output: 'executor did it',
    });
    expect(asked).toEqual([v1Hash]);
    // Every step named the task's version, so its hosts run the agents as v1 defined them.
    expect(agents.steps.map((s) => s.version)).toEqual([v1Hash, v1Hash, v1Hash]);

    await secondIntake.deliver({ id: 'task-2', goal: 'new' }).handled;
    expect(agents.steps.filter((s) => s.taskId === 'task-2').map((s) => s.stepId)).toEqual([
      'task-2.plan.1',
      'task-2.check.1',
    ]);
    expect((await store.get('task-2'))?.value).toMatchObject({ status: 'completed', version: v2Hash });
  });

  it('starts a new task on the newest version, even on a coordinator of an older one', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    const agents = agentsOn(bus);
    const intake = new MemoryTaskIntake();
    let newest: string | undefined = v2Hash;
    await startPipelineRunner({
      bus,
      clock,
      store,
      intake,
      config: v1,
      version: v1Hash,
      loadVersion: async (hash) => (hash === v2Hash ? v2 : undefined),
      newest: async () => newest,
      logger: createLogger({ level: 'silent' }),
      concurrency: 4,
    }).then((runner) => running.push(runner));
    await intake.deliver({ id: 'task-4', goal: 'new' }).handled;
    expect(agents.steps.map((s) => s.stepId)).toEqual(['task-4.plan.1', 'task-4.check.1']);
    expect((await store.get('task-4'))?.value).toMatchObject({ status: 'completed', version: v2Hash });
    // A newest version that cannot be loaded: its own, rather than none.
    newest = 'd'.repeat(64);
    await intake.deliver({ id: 'task-5', goal: 'new' }).handled;
    expect((await store.get('task-5'))?.value).toMatchObject({ status: 'completed', version: v1Hash });
  });

  it('fails as unresumable, naming the version, when its version is not stored', async () => {
    const { clock, bus, store, task } = await stoppedInExecute('task-3', 'lost');

    const secondIntake = new MemoryTaskIntake();
    await start({ bus, clock, store }, v2, secondIntake, async () => undefined);
    await secondIntake.deliver(
      { id: 'task-3', goal: 'lost' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    ).handled;
    const failed = bus.eventsOf('task.failed').find((e) => e.taskId === 'task-3');
    expect(failed?.data).toMatchObject({
      reason: 'unresumable',
      message: expect.stringContaining(`version ${v1Hash.slice(0, 12)} of pipeline unit is not stored`),
    });
  });
});
