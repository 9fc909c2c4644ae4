import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { followTaskEvents, readTaskEvents } from '@troupe/client';
import { FINAL_EVENT_KINDS } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe } from './support/cli.ts';
import { examplePath, type Harness, publishTask, startHarness } from './support/harness.ts';

/**
 * Event batching with the steps on a `troupe worker`, another process: its events wait a little in its batches, and
 * the coordinator ends the task on its last step's reply. A follower that stops at the task's final event must
 * still have every event the stream ends up with, the final one last, and a step's completion must come after the
 * worker's events of the step: the worker's open batches go before its reply. Twenty tasks at once keep the worker
 * busy enough that, without that, a step's last model reply was stored after its completion.
 */
describe('event batching with a remote worker', () => {
  let h: Harness;
  let worker: CliProcess;
  let workerHome: string;
  const TASKS = Array.from({ length: 20 }, (_, i) => `bw-${i}`);
  const followed = new Map<string, string[]>();

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')], { eventBatch: true, hostAgents: false });
    workerHome = await mkdtemp(join(tmpdir(), 'troupe-batch-worker-'));
    worker = startTroupe(
      ['worker', examplePath('demo.yaml'), '--server', h.nats.url, '--home', workerHome],
      cliEnv({ TROUPE_EVENT_BATCH: '1' }),
    );
    await worker.waitFor(/serving/, 60_000);
    const following = TASKS.map(async (taskId) => {
      const ids: string[] = [];
      followed.set(taskId, ids);
      await followTaskEvents(
        h.bus,
        { taskId, pipeline: 'demo' },
        { signal: AbortSignal.timeout(90_000), onEvent: ({ event }) => void ids.push(event.id) },
      );
    });
    for (const id of TASKS) publishTask(h, 'demo', { id, goal: 'write a hello note' });
    await Promise.all(following);
    // Stopped, the worker has stored every event it published: what the stream holds now is the whole flow.
    expect(await worker.stop()).toBe(0);
  }, 150_000);

  afterAll(async () => {
    await worker?.stop();
    await h?.stop();
    await rm(workerHome, { recursive: true, force: true });
  });

  it('stores each task’s final event after every event of its steps, so a follower that stops there misses none', async () => {
    for (const taskId of TASKS) {
      const stored = await readTaskEvents(h.bus, taskId, 'demo');
      expect(FINAL_EVENT_KINDS).toContain(stored.at(-1)?.kind);
      expect(stored.some((e) => e.kind === 'llm.response')).toBe(true);
      expect(followed.get(taskId)).toEqual(stored.map((e) => e.id));
    }
  });

  it('stores each step’s completion, which the coordinator publishes on the worker’s reply, after the worker’s events of the step', async () => {
    for (const taskId of TASKS) {
      const stored = await readTaskEvents(h.bus, taskId, 'demo');
      const stepOf = (e: (typeof stored)[number]) =>
        'stepId' in e.data && typeof e.data.stepId === 'string' ? e.data.stepId : undefined;
      const late = stored.flatMap((e, at) =>
        e.kind === 'step.completed'
          ? stored
              .slice(at + 1)
              .filter((after) => stepOf(after) === stepOf(e))
              .map((after) => after.kind)
          : [],
      );
      expect(late).toEqual([]);
    }
  });
});
