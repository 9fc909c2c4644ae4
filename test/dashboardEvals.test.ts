import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EvalStore, submitTask } from '@troupe/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import type { CaseResult, Experiment, Score, TroupeEvent } from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshotAtRest } from './support/dashboard.ts';
import { examplePath, type Harness, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ADMIN = 'dashboard-evals-0123456789abcdef';
const SHOTS = join(import.meta.dirname, '..', 'docs', 'img');

/**
 * `examples/evals/notes.yaml` as `scored-notes` with an `evals:` block that scores every task online: one scorer
 * every output passes, one none does.
 */
async function scoredNotes(dir: string): Promise<string> {
  const text = await readFile(examplePath('evals/notes.yaml'), 'utf8');
  const file = join(dir, 'scored-notes.yaml');
  await writeFile(
    file,
    `${text.replace(/^name: notes$/m, 'name: scored-notes')}
evals:
  sample: 1
  scorers:
    - { type: regex, name: says something, pattern: "." }
    - { type: regex, name: digits only, pattern: "^[0-9]+$" }
`,
  );
  await copyFile(examplePath('evals/notes.script.yaml'), join(dir, 'notes.script.yaml'));
  return file;
}

const score = (scorer: string, pass: boolean): Score => ({
  scorer,
  type: 'contains',
  value: pass ? 1 : 0,
  threshold: 1,
  pass,
  reason: pass ? `the note mentions ${scorer}` : `the note does not mention ${scorer}`,
});

/** A case's result: passed, or failed its `version` scorer; a live case names its task, a replay keeps its events. */
function caseResult(
  caseId: string,
  pass: boolean,
  run: { taskId: string; events?: TroupeEvent[] },
): CaseResult {
  return {
    caseId,
    status: pass ? 'passed' : 'failed',
    taskId: run.taskId,
    taskStatus: 'completed',
    output: 'Wrote notes/release.md.',
    scores: [score('title', true), score('version', pass)],
    usage: {
      inputTokens: 20,
      outputTokens: 10,
      cachedTokens: 0,
      costUsd: pass ? 0.002 : 0.005,
      modelCalls: 2,
    },
    durationMs: 1_200,
    tools: ['write_file'],
    steps: ['write', 'review'],
    ...(run.events ? { events: run.events } : {}),
  };
}

function experiment(id: string, mode: Experiment['mode'], cases: CaseResult[], startedAt: Date): Experiment {
  const passed = cases.filter((c) => c.status === 'passed').length;
  return {
    id,
    dataset: { name: 'release-notes', version: 1 },
    pipeline: { name: 'notes', file: 'notes.yaml', hash: `sha-${id}`, models: {} },
    mode,
    startedAt: startedAt.toISOString(),
    durationMs: 2_500,
    cases,
    totals: {
      cases: cases.length,
      passed,
      failed: cases.length - passed,
      errored: 0,
      skipped: 0,
      meanScore: (passed + cases.length) / (2 * cases.length),
      costUsd: cases.reduce((sum, c) => sum + c.usage.costUsd, 0),
      judgeCostUsd: 0,
      p50Ms: 1_200,
      p90Ms: 1_200,
    },
  };
}

describe('the dashboard’s experiments, their comparison and the task list’s scores, in a real browser', () => {
  let h: Harness;
  let gateway: Gateway;
  let browser: Browser;
  let page: Page;
  let dir: string;
  const tasks = ['notes-run-v1', 'notes-run-v2'];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-dash-evals-'));
    h = await startHarness([examplePath('evals/notes.yaml'), await scoredNotes(dir)]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens: new TokenStore([{ name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] }]),
      port: 0,
    });
    for (const [i, taskId] of tasks.entries()) {
      await submitTask(h.bus, 'notes', { id: taskId, goal: `Write the release note for v1.${i + 1}` });
      expect((await h.finalOf(taskId, 30_000)).kind).toBe('task.completed');
    }
    // A is a replay of the two runs (their events kept in the experiment); B ran them live, and v2 got worse.
    const [v1, v2] = tasks as [string, string];
    // A replay runs as a task of its own id: its events are the recorded run's, under that id.
    const replayed = (taskId: string) =>
      h.eventsOf(taskId).map((e) => ({ ...e, taskId: `replay-${taskId}` }));
    const store = new EvalStore(h.bus);
    const now = Date.now();
    await store.putExperiment(
      experiment(
        'notes-replay',
        'replay',
        [
          caseResult('release-v1', true, { taskId: `replay-${v1}`, events: replayed(v1) }),
          caseResult('release-v2', true, { taskId: `replay-${v2}`, events: replayed(v2) }),
        ],
        new Date(now - 60_000),
      ),
    );
    await store.putExperiment(
      experiment(
        'notes-live',
        'live',
        [caseResult('release-v1', true, { taskId: v1 }), caseResult('release-v2', false, { taskId: v2 })],
        new Date(now),
      ),
    );
    // `troupe eval run --mode live` runs its tasks in the CLI's process: the experiment keeps their events, and no
    // server knows the tasks.
    const cliRun = (taskId: string) => h.eventsOf(taskId).map((e) => ({ ...e, taskId: `cli-${taskId}` }));
    await store.putExperiment(
      experiment(
        'notes-cli-live',
        'live',
        [
          caseResult('release-v1', true, { taskId: `cli-${v1}`, events: cliRun(v1) }),
          caseResult('release-v2', false, { taskId: `cli-${v2}`, events: cliRun(v2) }),
        ],
        new Date(now - 120_000),
      ),
    );
    // Online scores of the two tasks, as a pipeline's `evals:` block publishes them after each task's end.
    for (const [taskId, pass] of [
      [v1, true],
      [v2, false],
    ] as const) {
      const ended = h.eventsOf(taskId).at(-1) as TroupeEvent;
      expect(
        await h.bus.publishEvent({
          id: `${taskId}.eval.scored`,
          ts: new Date().toISOString(),
          pipeline: 'notes',
          taskId,
          traceparent: ended.traceparent,
          kind: 'eval.scored',
          data: {
            status: 'completed',
            scores: [score('title', true), score('version', pass)],
            pass,
            sample: 1,
            costUsd: 0,
            durationMs: 3,
          },
        }),
      ).toBe(true);
    }
    await mkdir(SHOTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    await page.goto(gateway.url);
    await page.getByTestId('token').fill(ADMIN);
    await page.getByRole('button', { name: 'Open' }).click();
    await page.getByTestId('live').filter({ hasText: 'live' }).waitFor();
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    await h?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The timeline shown in the view open now (the other view's stays in the page, hidden). */
  const timeline = () => page.locator('main:not([hidden])').getByTestId('timeline');
  const timelineTask = async () =>
    ((await timeline().locator('h3').first().textContent()) ?? '').split(' ')[0];

  it('shows each task’s online score in the task list: pass or fail, with its mean score', async () => {
    const cell = (taskId: string) =>
      page.locator(`[data-testid=task-row][data-task="${taskId}"] [data-testid=task-score]`);
    await expect.poll(() => cell('notes-run-v1').textContent(), { timeout: 15_000 }).toBe('pass 1.00');
    expect(await cell('notes-run-v1').getAttribute('data-pass')).toBe('true');
    expect(await cell('notes-run-v2').textContent()).toBe('fail 0.50');
    expect(await cell('notes-run-v2').getAttribute('title')).toBe('1 of 2 scorers passed; failed: version');

    // A task of a pipeline with an `evals:` block is scored by its coordinator as it ends, and its row shows it live.
    await page.getByTestId('pipeline').selectOption('scored-notes');
    await page.getByTestId('goal').fill('Write the release note for v2.0');
    await page.getByTestId('submit').click();
    const scored = page.locator('[data-testid=task-row][data-status=completed] [data-testid=task-score]');
    await expect.poll(() => scored.textContent(), { timeout: 30_000 }).toBe('fail 0.50');
    expect(await scored.getAttribute('title')).toBe('1 of 2 scorers passed; failed: digits only');
    await page.getByTestId('pipeline').selectOption('notes');
  });

  it('lists the experiments, compares B with A, and opens the regressed case’s timeline', async () => {
    await page.getByTestId('view-experiments').click();
    const rows = page.getByTestId('experiment-row');
    await expect.poll(() => rows.count(), { timeout: 15_000 }).toBe(3);
    // Newest first, each with its dataset, mode, pass rate and mean score.
    expect(await rows.first().getAttribute('data-experiment')).toBe('notes-live');
    expect(await rows.first().textContent()).toContain('release-notes@1');
    expect(await rows.first().textContent()).toContain('50% (1/2)');
    expect(await rows.nth(1).textContent()).toContain('100% (2/2)');

    await page.getByTestId('compare-a').selectOption('notes-replay');
    await page.getByTestId('compare-b').selectOption('notes-live');
    const summary = page.getByTestId('comparison-summary');
    await summary.waitFor({ timeout: 15_000 });
    expect(await summary.getAttribute('data-verdict')).toBe('worse');
    expect(await page.getByTestId('cost-change').textContent()).toContain('+$0.0030');

    // The regression is listed first, with both sides, its score and cost deltas, and the scorer that changed.
    const regressed = page.locator('[data-testid=case-row][data-change=regressed]');
    expect(await regressed.count()).toBe(1);
    expect(await regressed.getAttribute('data-case')).toBe('release-v2');
    expect(await page.getByTestId('case-row').first().getAttribute('data-case')).toBe('release-v2');
    const cells = await regressed.locator('td').allTextContents();
    expect(cells).toEqual([
      'release-v2',
      'regressed',
      'passed',
      'failed',
      '−0.50',
      '+$0.0030',
      'version pass→fail',
    ]);
    expect(
      await page.locator('[data-testid=case-row][data-case=release-v1]').getAttribute('data-change'),
    ).toBe('unchanged');

    // B ran it live: its timeline is the task's.
    await regressed.click();
    const opened = page.getByTestId('open-case');
    await opened.waitFor();
    expect(await opened.getAttribute('data-side')).toBe('b');
    await expect.poll(timelineTask, { timeout: 15_000 }).toBe('notes-run-v2');
    expect(await timeline().textContent()).toContain('review');
    // A replayed it: its timeline comes from the events the experiment kept.
    await page.getByTestId('case-side-a').click();
    await expect.poll(() => opened.getAttribute('data-side')).toBe('a');
    await expect.poll(timelineTask, { timeout: 15_000 }).toBe('replay-notes-run-v2');
    expect(await timeline().textContent()).toContain('review');
    expect(await timeline().locator('.status').first().textContent()).toBe('completed');
    await page.getByTestId('case-side-b').click();
    await screenshotAtRest(page, join(SHOTS, 'dashboard-experiments.png'));

    // The live task opens in the task view, with its own timeline.
    await page.getByTestId('case-open-task').click();
    await page
      .locator('[data-testid=task-row][data-task="notes-run-v2"].selected')
      .waitFor({ timeout: 15_000 });
    await expect.poll(timelineTask, { timeout: 15_000 }).toBe('notes-run-v2');
  }, 60_000);

  it('draws a CLI live run’s case from the events it kept, and offers no task the server does not know', async () => {
    await page.getByTestId('view-experiments').click();
    await page.getByTestId('compare-a').selectOption('notes-replay');
    await page.getByTestId('compare-b').selectOption('notes-cli-live');
    const regressed = page.locator('[data-testid=case-row][data-change=regressed]');
    await regressed.waitFor({ timeout: 15_000 });
    await regressed.click();
    const opened = page.getByTestId('open-case');
    await expect.poll(() => opened.getAttribute('data-side'), { timeout: 15_000 }).toBe('b');
    await expect.poll(timelineTask, { timeout: 15_000 }).toBe('cli-notes-run-v2');
    expect(await timeline().textContent()).toContain('review');
    expect(await page.getByTestId('case-open-task').count()).toBe(0);
  }, 60_000);
});
