import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { EVALS_BUCKET, type EvalCase, type Experiment } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvalStore } from '../src/evalStore.ts';

const ZERO = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 };

function experiment(id: string, startedAt: string, passed: number): Experiment {
  return {
    id,
    dataset: { name: 'support', version: 1 },
    pipeline: { name: 'demo', file: 'demo.yaml', hash: 'ab'.repeat(32), models: {} },
    mode: 'replay',
    startedAt,
    durationMs: 10,
    cases: [{ caseId: 'a', status: 'passed', scores: [], usage: ZERO, durationMs: 5, tools: [], steps: [] }],
    totals: {
      cases: 1,
      passed,
      failed: 1 - passed,
      errored: 0,
      skipped: 0,
      meanScore: passed,
      costUsd: 0,
      judgeCostUsd: 0,
      p50Ms: 5,
      p90Ms: 5,
    },
  };
}

describe('EvalStore', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let store: EvalStore;

  beforeAll(async () => {
    nats = await startTestNats();
    nc = await connect({ servers: nats.url });
    store = new EvalStore({ connection: nc });
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it('answers empty before anything is stored, without making the bucket', async () => {
    expect(await store.datasets()).toEqual([]);
    expect(await store.dataset('support')).toBeUndefined();
    expect(await store.dataset('support', 2)).toBeUndefined();
    expect(await store.experiments()).toEqual([]);
    expect(await store.experiment('nope')).toBeUndefined();
    const jsm = await jetstreamManager(nc);
    await expect(jsm.streams.info(`OBJ_${EVALS_BUCKET}`)).rejects.toThrow(/stream not found/);
  });

  it('stores each dataset add as the next version, and reads any version back whole', async () => {
    const big = 'y'.repeat(300_000);
    const cases: EvalCase[] = [
      { id: 'a', goal: 'first', expected: 'one' },
      {
        id: 'b',
        goal: 'second',
        recording: {
          taskId: 'b',
          pipeline: 'demo',
          events: [],
          journal: {},
          values: { 'troupe-values-demo/x': big },
        },
      },
    ];
    const first = await store.putDataset({
      name: 'support',
      description: 'v1',
      scorers: [],
      cases: cases.slice(0, 1),
    });
    expect(first).toMatchObject({ name: 'support', version: 1, description: 'v1', cases: cases.slice(0, 1) });
    const second = await store.putDataset({
      name: 'support',
      scorers: [{ type: 'contains', value: 'one' }],
      cases,
    });
    expect(second.version).toBe(2);
    const other = await store.putDataset({ name: 'nightly', scorers: [], cases: cases.slice(0, 1) });
    expect(other.version).toBe(1);

    expect(await store.dataset('support')).toEqual(second);
    expect(await store.dataset('support', 1)).toEqual(first);
    expect((await store.dataset('support', 2))?.cases[1]?.recording?.values['troupe-values-demo/x']).toBe(
      big,
    );
    expect(await store.dataset('support', 3)).toBeUndefined();
    expect(await store.dataset('absent')).toBeUndefined();

    // Newest first, each version with its counts, read from the objects' metadata.
    expect(await store.datasets()).toEqual([
      { name: 'nightly', version: 1, createdAt: other.createdAt, cases: 1, recorded: 0 },
      { name: 'support', version: 2, createdAt: second.createdAt, cases: 2, recorded: 1 },
      { name: 'support', version: 1, createdAt: first.createdAt, cases: 1, recorded: 0, description: 'v1' },
    ]);
  });

  it('stores experiments by id, refusing a second put under one id unless it replaces, listed newest first', async () => {
    await store.putExperiment(experiment('old', '2026-01-01T00:00:00.000Z', 1));
    await store.putExperiment(experiment('new', '2026-02-01T00:00:00.000Z', 0));
    await expect(store.putExperiment(experiment('old', '2026-01-01T00:00:00.000Z', 0))).rejects.toMatchObject(
      {
        code: 'conflict',
        message:
          "experiment old is stored already: give this one another id (troupe eval run --name), or replace it (--replace; putExperiment's replace option)",
      },
    );
    expect((await store.experiment('old'))?.totals.passed).toBe(1);
    await store.putExperiment(experiment('old', '2026-01-01T00:00:00.000Z', 0), { replace: true });
    expect(await store.experiment('new')).toEqual(experiment('new', '2026-02-01T00:00:00.000Z', 0));
    expect((await store.experiment('old'))?.totals.passed).toBe(0);
    const listed = await store.experiments();
    expect(listed.map((e) => e.id)).toEqual(['new', 'old']);
    expect(listed[1]).toEqual({
      id: 'old',
      dataset: { name: 'support', version: 1 },
      mode: 'replay',
      startedAt: '2026-01-01T00:00:00.000Z',
      totals: experiment('old', '', 0).totals,
      pipeline: { name: 'demo', hash: 'ab'.repeat(32) },
    });
    // The experiments listing holds no dataset, nor the datasets listing an experiment.
    expect((await store.datasets()).map((d) => d.name)).toEqual(['nightly', 'support', 'support']);
  });

  it('keeps every add of writers adding to one dataset at once, each on a connection of its own', async () => {
    const writers = await Promise.all(Array.from({ length: 4 }, () => connect({ servers: nats.url })));
    try {
      const kase = (id: string): EvalCase => ({ id, goal: `goal ${id}` });
      await Promise.all(
        writers.map((connection, i) =>
          new EvalStore({ connection }).addDataset('racing', (previous) => ({
            name: 'racing',
            scorers: [],
            cases: [...(previous?.cases ?? []), kase(`w${i}`)],
          })),
        ),
      );
      const newest = await store.dataset('racing');
      expect(newest?.version).toBe(4);
      expect(newest?.cases.map((c) => c.id).sort()).toEqual(['w0', 'w1', 'w2', 'w3']);
      const versions = (await store.datasets()).filter((d) => d.name === 'racing').map((d) => d.cases);
      expect(versions.sort()).toEqual([1, 2, 3, 4]);
    } finally {
      await Promise.all(writers.map((w) => w.close()));
    }
  });

  it('refuses to store a dataset whose name is not a name', async () => {
    await expect(store.putDataset({ name: 'Not A Name', scorers: [], cases: [] })).rejects.toThrow(
      /must be 1-63/,
    );
  });
});
