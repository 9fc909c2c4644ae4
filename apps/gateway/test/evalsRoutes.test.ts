import { EvalStore } from '@troupe/client';
import { createLogger } from '@troupe/runtime';
import { connectBus, ensureTroupeStreams, type JetStreamBus } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, TokenStore } from '../src/auth.ts';
import { type Gateway, startGateway } from '../src/gateway.ts';
import { caseResult, experiment, scoredEvent } from './evalsFixtures.ts';

const TOKENS = {
  reader: 'evals-reader-token-0123456789ab',
  notesOnly: 'evals-notes-token-0123456789abc',
};

let nats: TestNats;
let bus: JetStreamBus;
let gateway: Gateway;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'evals-test', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
  gateway = await startGateway({
    bus,
    logger: createLogger({ level: 'silent' }),
    tokens: new TokenStore([
      { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
      { name: 'notes-team', sha256: hashToken(TOKENS.notesOnly), scopes: ['admin'], pipelines: ['notes'] },
    ]),
    port: 0,
  });
});

afterAll(async () => {
  await gateway?.close();
  await bus?.close();
  await nats?.stop();
});

// biome-ignore lint/suspicious/noExplicitAny: the answers are JSON a test picks apart as it likes.
type Json = any;

/** A GET with a token (none with `anonymous`), and its status and JSON body. */
async function get(path: string, token: keyof typeof TOKENS | 'anonymous' = 'reader') {
  const response = await fetch(`${gateway.url}${path}`, {
    headers: token === 'anonymous' ? {} : { authorization: `Bearer ${TOKENS[token]}` },
  });
  return { status: response.status, body: (await response.json()) as Json };
}

describe('the gateway’s eval routes', () => {
  it('answers empty lists before anything is stored, the bucket not made yet', async () => {
    expect(await get('/v1/evals/experiments')).toEqual({ status: 200, body: { experiments: [] } });
    expect(await get('/v1/evals/datasets')).toEqual({ status: 200, body: { datasets: [] } });
    const missing = await get('/v1/evals/experiments/none-yet');
    expect(missing.status).toBe(404);
  });

  describe('with datasets and experiments stored', () => {
    beforeAll(async () => {
      const store = new EvalStore(bus);
      const first = { name: 'notes', goal: 'a release note for v1' };
      await store.putDataset({ name: 'notes', scorers: [], cases: [{ id: 'v1', goal: first.goal }] });
      await store.putDataset({
        name: 'notes',
        description: 'release notes',
        scorers: [{ type: 'contains', value: 'notes' }],
        cases: [
          { id: 'v1', goal: first.goal },
          { id: 'v2', goal: 'a release note for v2', expected: 'notes' },
        ],
      });
      const baseline = experiment('notes-base', 'notes', [
        caseResult('notes', 'v1', true),
        caseResult('notes', 'v2', true),
        caseResult('notes', 'live-1', true, { events: false, taskId: 'no-such-task' }),
      ]);
      const worse = experiment(
        'notes-worse',
        'notes',
        [
          caseResult('notes', 'v1', true),
          caseResult('notes', 'v2', false, { costUsd: 0.03 }),
          {
            ...caseResult('notes', 'live-1', false, { events: false }),
            status: 'error',
            error: 'the pipeline could not start',
            taskId: undefined,
          },
        ],
        new Date(Date.now() + 1_000).toISOString(),
      );
      await store.putExperiment(baseline);
      await store.putExperiment(worse);
      await store.putExperiment(experiment('secret-run', 'secret', [caseResult('secret', 'x', true)]));
    });

    it('lists every version of every dataset, newest first, and reads the newest or the version asked', async () => {
      const list = await get('/v1/evals/datasets');
      expect(list.status).toBe(200);
      expect(list.body.datasets.map((d: { version: number }) => d.version)).toEqual([2, 1]);
      expect(list.body.datasets[0]).toMatchObject({ name: 'notes', cases: 2, recorded: 0 });

      const newest = await get('/v1/evals/datasets/notes');
      expect(newest.status).toBe(200);
      expect(newest.body).toMatchObject({ name: 'notes', version: 2, description: 'release notes' });
      expect(newest.body.cases.map((c: { id: string }) => c.id)).toEqual(['v1', 'v2']);
      const first = await get('/v1/evals/datasets/notes?version=1');
      expect(first.body).toMatchObject({ version: 1, cases: [{ id: 'v1' }] });
    });

    it('answers 404 for a dataset or version not stored, saying which versions there are', async () => {
      const unknown = await get('/v1/evals/datasets/nope');
      expect(unknown).toEqual({
        status: 404,
        body: { error: { code: 'not_found', message: 'no dataset nope is stored' } },
      });
      const version = await get('/v1/evals/datasets/notes?version=7');
      expect(version.status).toBe(404);
      expect(version.body.error.message).toBe('dataset notes has no version 7 (it has 1, 2)');
      const bad = await get('/v1/evals/datasets/notes?version=latest');
      expect(bad.status).toBe(400);
      expect(bad.body.error.code).toBe('invalid_request');
    });

    it('lists the experiments newest first, each with its totals', async () => {
      const list = await get('/v1/evals/experiments');
      expect(list.status).toBe(200);
      const ids = list.body.experiments.map((e: { id: string }) => e.id);
      expect(ids).toEqual(expect.arrayContaining(['notes-worse', 'notes-base', 'secret-run']));
      expect(ids.indexOf('notes-worse')).toBeLessThan(ids.indexOf('notes-base'));
      const worse = list.body.experiments.find((e: { id: string }) => e.id === 'notes-worse');
      expect(worse).toMatchObject({
        dataset: { name: 'notes', version: 1 },
        mode: 'replay',
        pipeline: { name: 'notes' },
        totals: { cases: 3, passed: 1 },
      });
      expect(worse.cases).toBeUndefined();
      const whole = await get('/v1/evals/experiments/notes-worse');
      expect(whole.status).toBe(200);
      expect(whole.body.cases.map((c: { caseId: string }) => c.caseId)).toEqual(['v1', 'v2', 'live-1']);
      const missing = await get('/v1/evals/experiments/nope');
      expect(missing).toEqual({
        status: 404,
        body: { error: { code: 'not_found', message: 'no experiment nope is stored' } },
      });
    });

    it('compares two experiments: the case that passed in A and fails in B regressed, and B is worse', async () => {
      const compared = await get('/v1/evals/compare?a=notes-base&b=notes-worse');
      expect(compared.status).toBe(200);
      expect(compared.body.a.id).toBe('notes-base');
      expect(compared.body.b.id).toBe('notes-worse');
      const v2 = compared.body.cases.find((c: { caseId: string }) => c.caseId === 'v2');
      expect(v2).toMatchObject({ change: 'regressed', a: { status: 'passed' }, b: { status: 'failed' } });
      expect(v2.costDeltaUsd).toBeCloseTo(0.02);
      expect(compared.body.cases.find((c: { caseId: string }) => c.caseId === 'v1').change).toBe('unchanged');
      expect(compared.body.summary).toMatchObject({ verdict: 'worse', counts: { regressed: 2 } });

      const missing = await get('/v1/evals/compare?a=notes-base&b=nope');
      expect(missing.status).toBe(404);
      expect(missing.body.error.message).toBe('no experiment nope is stored');
      const half = await get('/v1/evals/compare?a=notes-base');
      expect(half.status).toBe(400);
      expect(half.body.error.message).toContain('b');
    });

    it('gives a replayed case’s timeline from its stored events, and says why a case has none', async () => {
      const trace = await get('/v1/evals/experiments/notes-worse/cases/v2/trace');
      expect(trace.status).toBe(200);
      expect(trace.body).toMatchObject({
        taskId: 'replay-v2-f',
        pipeline: 'notes',
        status: 'completed',
        output: 'notes',
        steps: [{ step: 'write', agent: 'writer' }],
      });
      const errored = await get('/v1/evals/experiments/notes-worse/cases/live-1/trace');
      expect(errored.status).toBe(404);
      expect(errored.body.error.message).toBe(
        'case live-1 of experiment notes-worse has no timeline: it kept no events and ran no task (the pipeline could not start)',
      );
      // A live case's timeline is its task's, which this server does not know.
      const live = await get('/v1/evals/experiments/notes-base/cases/live-1/trace');
      expect(live.status).toBe(404);
      expect(live.body.error.message).toContain('no-such-task');
      const unknown = await get('/v1/evals/experiments/notes-worse/cases/v9/trace');
      expect(unknown.body.error.message).toBe('experiment notes-worse has no case v9');
    });

    it('shows a token limited to some pipelines only their experiments, and no dataset', async () => {
      const list = await get('/v1/evals/experiments', 'notesOnly');
      expect(list.body.experiments.map((e: { id: string }) => e.id).sort()).toEqual([
        'notes-base',
        'notes-worse',
      ]);
      // Another pipeline's experiment does not exist for it, as another pipeline's task does not.
      expect((await get('/v1/evals/experiments/secret-run', 'notesOnly')).status).toBe(404);
      expect((await get('/v1/evals/compare?a=secret-run&b=notes-base', 'notesOnly')).status).toBe(404);
      expect((await get('/v1/evals/experiments/secret-run')).status).toBe(200);
      const datasets = await get('/v1/evals/datasets', 'notesOnly');
      expect(datasets.status).toBe(403);
      expect(datasets.body.error.message).toContain('datasets may hold runs of any pipeline');
      expect((await get('/v1/evals/datasets/notes', 'notesOnly')).status).toBe(403);
      expect((await get('/v1/evals/experiments', 'anonymous')).status).toBe(401);
    });
  });

  it('gives the online scores of tasks scored since a time, of the pipelines the token may touch', async () => {
    const since = new Date(Date.now() - 1_000).toISOString();
    const none = await get(`/v1/evals/scores?since=${since}`);
    expect(none).toEqual({ status: 200, body: { scores: [] } });
    const stored = await Promise.all([
      bus.publishEvent(scoredEvent('notes', 'notes-t1', true)),
      bus.publishEvent(scoredEvent('notes', 'notes-t2', false)),
      bus.publishEvent(scoredEvent('secret', 'secret-t1', true)),
    ]);
    expect(stored).toEqual([true, true, true]);
    // The same task's score published again (a redelivered end) is shown once.
    expect(await bus.publishEvent({ ...scoredEvent('notes', 'notes-t2', false), id: 'again' })).toBe(true);

    const all = await get(`/v1/evals/scores?since=${since}`);
    expect(all.status).toBe(200);
    expect(all.body.scores.map((s: { taskId: string }) => s.taskId).sort()).toEqual([
      'notes-t1',
      'notes-t2',
      'secret-t1',
    ]);
    expect(all.body.scores.find((s: { taskId: string }) => s.taskId === 'notes-t2')).toMatchObject({
      pipeline: 'notes',
      status: 'completed',
      pass: false,
      meanScore: 0.5,
      scorers: 2,
      failed: ['mentions-tool'],
    });
    const notes = await get(`/v1/evals/scores?since=${since}`, 'notesOnly');
    expect(notes.body.scores.map((s: { taskId: string }) => s.taskId).sort()).toEqual([
      'notes-t1',
      'notes-t2',
    ]);
    const one = await get(`/v1/evals/scores?since=${since}&pipeline=secret`);
    expect(one.body.scores.map((s: { taskId: string }) => s.taskId)).toEqual(['secret-t1']);
    expect((await get(`/v1/evals/scores?since=${since}&pipeline=secret`, 'notesOnly')).status).toBe(403);
    // Scores from before `since` are not read.
    const later = await get(`/v1/evals/scores?since=${new Date(Date.now() + 60_000).toISOString()}`);
    expect(later.body.scores).toEqual([]);
    expect((await get('/v1/evals/scores?since=yesterday')).status).toBe(400);
  });

  it('lists the routes and their shapes in the OpenAPI document', async () => {
    const doc = gateway.openapi() as {
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, unknown> };
    };
    for (const path of [
      '/v1/evals/datasets',
      '/v1/evals/datasets/{name}',
      '/v1/evals/experiments',
      '/v1/evals/experiments/{id}',
      '/v1/evals/experiments/{id}/cases/{caseId}/trace',
      '/v1/evals/compare',
      '/v1/evals/scores',
    ]) {
      expect(doc.paths[path], path).toHaveProperty('get');
    }
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(['Dataset', 'DatasetList', 'Experiment', 'ExperimentList', 'EvalComparison']),
    );
    // The events a dataset's recordings and an experiment's cases hold are one component, not a copy in each.
    for (const shape of ['Dataset', 'Experiment'])
      expect(JSON.stringify(doc.components.schemas[shape])).toContain('"#/components/schemas/Event"');
    const served = await get('/openapi.json');
    expect(Object.keys(served.body.paths)).toContain('/v1/evals/compare');
  });
});
