import { createHash } from 'node:crypto';
import { type CaseResult, type Dataset, type EvalCase, Experiment } from '@troupe/protocol';
import { afterAll, describe, expect, it } from 'vitest';
import type { LoadedPipeline } from '../../src/config/loadPipeline.ts';
import { type ExperimentOptions, runExperiment } from '../../src/evals/runExperiment.ts';
import { evalPipeline, noEffects, recordedCase, removePipelines, type Turn } from './runSupport.ts';

afterAll(removePipelines);

const stampA: Turn[] = [
  { toolCalls: [{ name: 'stamp', arguments: { label: 'a' } }] },
  { content: 'stamped a, done' },
];

const datasetOf = (cases: EvalCase[], scorers: Dataset['scorers'] = []): Dataset => ({
  name: 'stamps',
  version: 3,
  createdAt: '2026-12-01T00:00:00.000Z',
  scorers,
  cases,
});

const options = (
  pipeline: LoadedPipeline,
  dataset: Dataset,
  more: Partial<ExperimentOptions> = {},
): ExperimentOptions => ({
  dataset,
  pipeline,
  pipelineFile: 'evaldemo.yaml',
  pipelineText: 'the text of the file',
  mode: 'model',
  baseDir: '.',
  ...more,
});

describe('runExperiment', () => {
  it('runs and scores every case, and sums them up', async () => {
    const pipeline = await evalPipeline(stampA, noEffects());
    const cases = [
      await recordedCase(pipeline, 'one', 'stamp a'),
      await recordedCase(pipeline, 'two', 'stamp a again'),
    ];
    const dataset = datasetOf(cases, [{ type: 'contains', value: 'done' }]);
    const told: [string, number, number][] = [];
    const experiment = await runExperiment(
      options(pipeline, dataset, {
        mode: 'replay',
        name: 'baseline',
        onCase: (result, done, total) => told.push([result.caseId, done, total]),
      }),
    );
    expect(experiment).toMatchObject({
      id: 'baseline',
      dataset: { name: 'stamps', version: 3 },
      pipeline: {
        name: 'evaldemo',
        file: 'evaldemo.yaml',
        hash: createHash('sha256').update('the text of the file').digest('hex'),
        models: { scripted: { provider: 'scripted', model: 'scripted' } },
      },
      mode: 'replay',
      totals: { cases: 2, passed: 2, failed: 0, errored: 0, skipped: 0, meanScore: 1 },
    });
    expect(experiment.cases.map((c) => [c.caseId, c.status, c.taskId, c.tools, c.steps])).toEqual([
      ['one', 'passed', cases[0]?.recording?.taskId, ['stamp'], ['work']],
      ['two', 'passed', cases[1]?.recording?.taskId, ['stamp'], ['work']],
    ]);
    expect(experiment.cases[0]?.events?.at(-1)?.kind).toBe('task.completed');
    // As the store and the gateway read it back.
    expect(Experiment.parse(JSON.parse(JSON.stringify(experiment)))).toEqual(experiment);
    expect(told.map(([, done, total]) => [done, total])).toEqual([
      [1, 2],
      [2, 2],
    ]);
  });

  it('names an experiment without a name after its dataset and the time', async () => {
    const pipeline = await evalPipeline(stampA, noEffects());
    const experiment = await runExperiment(options(pipeline, datasetOf([{ id: 'x', goal: 'stamp a' }])));
    expect(experiment.id).toMatch(/^stamps-\d{8}T\d{9}Z$/);
  });

  it('keeps a case that throws as an error result, with why, and completes the others', async () => {
    const pipeline = await evalPipeline(stampA, noEffects());
    const recorded = await recordedCase(pipeline, 'recorded', 'stamp a');
    const dataset = datasetOf(
      [
        recorded,
        { id: 'bare', goal: 'stamp a' },
        { ...recorded, id: 'unscorable', scorers: [{ type: 'regex', pattern: '(' }] },
      ],
      [{ type: 'contains', value: 'done' }],
    );
    const experiment = await runExperiment(options(pipeline, dataset, { mode: 'replay' }));
    const byId = new Map(experiment.cases.map((c) => [c.caseId, c]));
    expect(byId.get('recorded')?.status).toBe('passed');
    expect(byId.get('bare')).toMatchObject({
      status: 'error',
      error: 'case bare has no recording; run it with --mode model or live',
      scores: [],
    });
    expect(byId.get('unscorable')).toMatchObject({
      status: 'error',
      error: expect.stringContaining('regex'),
    });
    expect(experiment.totals).toMatchObject({ cases: 3, passed: 1, errored: 2, skipped: 0 });
    // The errors count 0 in the mean: (1 + 0 + 0) / 3.
    expect(experiment.totals.meanScore).toBeCloseTo(1 / 3);
  });

  it('fails a case whose scorer does not pass', async () => {
    const pipeline = await evalPipeline(stampA, noEffects());
    const dataset = datasetOf([{ id: 'x', goal: 'stamp a' }], [{ type: 'contains', value: 'nowhere' }]);
    const experiment = await runExperiment(options(pipeline, dataset));
    expect(experiment.cases[0]).toMatchObject({ status: 'failed', scores: [{ pass: false }] });
    expect(experiment.totals).toMatchObject({ passed: 0, failed: 1, meanScore: 0 });
  });

  it('fails a case whose task failed, though it has no scores, and passes one whose task completed', async () => {
    const failing = await evalPipeline([{ toolCalls: [{ name: 'nope', arguments: {} }] }], noEffects());
    const failed = await runExperiment(options(failing, datasetOf([{ id: 'x', goal: 'stamp a' }], [])));
    expect(failed.cases[0]).toMatchObject({ taskStatus: 'failed', status: 'failed', scores: [] });
    expect(failed.totals).toMatchObject({ passed: 0, failed: 1, meanScore: 0 });
    const completing = await evalPipeline(stampA, noEffects());
    const passed = await runExperiment(options(completing, datasetOf([{ id: 'x', goal: 'stamp a' }], [])));
    expect(passed.cases[0]).toMatchObject({ taskStatus: 'completed', status: 'passed', scores: [] });
  });

  it('fails a case whose task failed even when each of its scores passes', async () => {
    const failing = await evalPipeline([{ toolCalls: [{ name: 'nope', arguments: {} }] }], noEffects());
    const dataset = datasetOf([{ id: 'x', goal: 'stamp a' }], [{ type: 'cel', expr: 'true' }]);
    const experiment = await runExperiment(options(failing, dataset));
    expect(experiment.cases[0]).toMatchObject({
      taskStatus: 'failed',
      status: 'failed',
      scores: [{ pass: true }],
    });
  });

  it('starts no case once the budget is spent, and lists the rest as not run', async () => {
    const pipeline = await evalPipeline(stampA, noEffects(), { priced: true });
    const cases = ['a', 'b', 'c'].map((id) => ({ id, goal: 'stamp a' }));
    const experiment = await runExperiment(
      options(pipeline, datasetOf(cases), { concurrency: 1, budgetUsd: 0.000001 }),
    );
    const [first, ...rest] = experiment.cases;
    expect(first?.status).toBe('passed');
    expect(first?.usage.costUsd).toBeGreaterThan(0.000001);
    expect(rest).toEqual(
      ['b', 'c'].map(
        (caseId): CaseResult => ({
          caseId,
          status: 'error',
          error: 'not run: the budget of $0.000001 was spent',
          scores: [],
          usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
          durationMs: 0,
          tools: [],
          steps: [],
        }),
      ),
    );
    expect(experiment.totals).toMatchObject({ cases: 3, passed: 1, errored: 0, skipped: 2 });
    expect(experiment.totals.costUsd).toBe(first?.usage.costUsd);
    // A case not run counts 0 in the mean score, as a comparison counts it (caseMeanScore).
    expect(experiment.totals.meanScore).toBeCloseTo(1 / 3, 10);
    // The spend against the budget, over it by what the case already started spent.
    expect(experiment.budget).toEqual({ usd: 0.000001, spentUsd: first?.usage.costUsd });
  });

  it('keeps no budget when none was given, and what was spent against one that was not reached', async () => {
    const pipeline = await evalPipeline(stampA, noEffects(), { priced: true });
    const cases = [{ id: 'a', goal: 'stamp a' }];
    expect((await runExperiment(options(pipeline, datasetOf(cases)))).budget).toBeUndefined();
    const within = await runExperiment(options(pipeline, datasetOf(cases), { budgetUsd: 5 }));
    expect(within.budget).toEqual({ usd: 5, spentUsd: within.totals.costUsd });
    expect(within.budget?.spentUsd).toBeGreaterThan(0);
  });

  it('runs each case that cannot spend whatever the budget: a replay without judges, even with a budget of $0', async () => {
    const pipeline = await evalPipeline(stampA, noEffects(), { priced: true });
    const cases = [
      await recordedCase(pipeline, 'one', 'stamp a'),
      await recordedCase(pipeline, 'two', 'stamp a'),
    ];
    const replayed = await runExperiment(
      options(pipeline, datasetOf(cases, [{ type: 'contains', value: 'done' }]), {
        mode: 'replay',
        concurrency: 1,
        budgetUsd: 0,
      }),
    );
    expect(replayed.cases.map((c) => c.status)).toEqual(['passed', 'passed']);
    expect(replayed.totals).toMatchObject({ passed: 2, skipped: 0 });
    // A case that may spend is still held to it: in model mode, $0 runs nothing.
    const modelled = await runExperiment(
      options(pipeline, datasetOf(cases), { mode: 'model', concurrency: 1, budgetUsd: 0 }),
    );
    expect(modelled.totals).toMatchObject({ passed: 0, skipped: 2 });
  });

  it('runs at most `concurrency` cases at once', async () => {
    const effects = noEffects();
    let release = () => {};
    effects.probes.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const pipeline = await evalPipeline(
      [{ toolCalls: [{ name: 'probe', arguments: {} }] }, { content: 'probed' }],
      effects,
    );
    const cases = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id, goal: 'probe' }));
    const running = runExperiment(options(pipeline, datasetOf(cases), { concurrency: 2 }));
    // Two cases reach the probe and wait there; had more started, they would be waiting too.
    await expect.poll(() => effects.probes.now).toBe(2);
    release();
    const experiment = await running;
    expect(effects.probes.most).toBe(2);
    expect(experiment.totals).toMatchObject({ cases: 5, passed: 5 });
  });
});
