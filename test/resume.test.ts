import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { BUCKETS, PipelineVersion, WorkflowRecord } from '@troupe/protocol';
import { createLogger, KvStore, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  eventOf,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

describe('a coordinator stopped mid-task', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('resume.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('hands the task back, and the next coordinator resumes it from its checkpoint', async () => {
    publishTask(h, 'resume', { id: 'res-1', goal: 'survive a restart' });
    await eventOf(h, 'res-1', 'step.started');
    await h.coordinator.stop();

    const second = await startSecondCoordinator(h, ['resume.yaml']);
    try {
      const final = await h.finalOf('res-1', 30_000);
      expect(final.kind).toBe('task.completed');
      const events = kinds(h.eventsOf('res-1'));
      expect(events.filter((k) => k === 'task.accepted')).toHaveLength(1);
      // The second coordinator resumed in the plan step (its entry is not replayed) and asked the planner again.
      const resumed = h.eventsOf('res-1').find((e) => e.kind === 'task.resumed');
      expect(resumed?.data).toMatchObject({ state: 'plan', round: 1 });
      expect(resumed?.kind === 'task.resumed' && resumed.data.deliveries).toBeGreaterThan(1);
      const started = h.eventsOf('res-1').flatMap((e) => (e.kind === 'step.started' ? [e.data.step] : []));
      expect(started).toEqual(['plan', 'execute']);
      const plannerCalls = h
        .eventsOf('res-1')
        .filter((e) => e.kind === 'llm.request' && e.data.agent === 'planner');
      expect(plannerCalls).toHaveLength(2);
      expect(await readFile(join(h.workspaceRoot, 'resume', 'res-1', 'out.md'), 'utf8')).toBe('resumed');
    } finally {
      await second.stop();
    }
  });

  // Its own version stored, a task resumes on it whatever the file says now (test/versionedDeploy.test.ts); without it,
  // the checkpoint fits nothing this coordinator has.
  it('ends a task whose version is no longer stored and whose checkpoint does not fit the pipeline, instead of hanging it', async () => {
    const logger = createLogger({ level: 'silent' });
    const registry = builtinTools();
    const start = async (file: string, name: string) => {
      const bus = await NatsBus.connect({ servers: h.nats.url, name, logger });
      const coordinator = await startCoordinator({
        bus,
        pipelines: [await loadPipeline(file, { toolNames: registry.names() })],
        logger,
        workspaceRoot: h.workspaceRoot,
        registry,
      });
      return { bus, coordinator };
    };
    const first = await start(fixturePath('resume.yaml'), 'first');
    publishTask(h, 'resume', { id: 'res-2', goal: 'outlive a pipeline change' });
    await eventOf(h, 'res-2', 'step.started');
    await first.coordinator.stop();
    await first.bus.close();
    const version = (await (await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord)).get('res-2'))?.value
      .version;
    expect(version).toMatch(/^[0-9a-f]{64}$/);
    await (await KvStore.open(h.bus, BUCKETS.versions, PipelineVersion)).delete(`resume.${version}`);

    const dir = await mkdtemp(join(tmpdir(), 'troupe-changed-'));
    const text = (await readFile(fixturePath('resume.yaml'), 'utf8'))
      .replace('./resume.script.yaml', fixturePath('resume.script.yaml'))
      .replaceAll('id: plan', 'id: think');
    await writeFile(join(dir, 'resume.yaml'), text);
    const changed = await start(join(dir, 'resume.yaml'), 'changed');
    try {
      const final = await h.finalOf('res-2', 30_000);
      expect(final.kind).toBe('task.failed');
      expect(final.kind === 'task.failed' && final.data.reason).toBe('unresumable');
      expect(final.kind === 'task.failed' && final.data.message).toContain(
        `version ${version?.slice(0, 12)} of pipeline resume is not stored`,
      );
      expect(changed.coordinator.running()).not.toContain('res-2');
    } finally {
      await changed.coordinator.stop();
      await changed.bus.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
