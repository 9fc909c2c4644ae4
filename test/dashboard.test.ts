import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePath, fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const TOKEN = 'dashboard-token-0123456789abcdef';
/** Screenshots for people to look at; git ignores the folder. */
const ARTIFACTS = join(import.meta.dirname, 'artifacts');

describe('the dashboard, in a real browser', () => {
  let h: Harness;
  let gateway: Gateway;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    h = await startHarness([
      examplePath('demo.yaml'),
      fixturePath('gated.yaml'),
      fixturePath('asker.yaml'),
      examplePath('triage.yaml'),
      fixturePath('shaped.yaml'),
      fixturePath('outline.yaml'),
    ]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens: new TokenStore([{ name: 'ops', sha256: hashToken(TOKEN), scopes: ['admin'] }]),
      port: 0,
    });
    await mkdir(ARTIFACTS, { recursive: true });
    // Tests run as root in CI containers, where Chromium's own sandbox cannot start.
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    await h?.stop();
  });

  const shownTask = async () =>
    (await page.getByTestId('timeline').locator('h3').count()) === 0
      ? ''
      : ((await page.getByTestId('timeline').locator('h3').textContent())?.split(' ')[0] ?? '');
  const submit = async (pipeline: string, goal: string): Promise<string> => {
    const before = await shownTask();
    await page.getByTestId('pipeline').selectOption(pipeline);
    await page.getByTestId('goal').fill(goal);
    await page.getByTestId('submit').click();
    // The new task is selected: its timeline opens in place of the one shown before.
    let taskId = '';
    await expect
      .poll(async () => (taskId = await shownTask()), { timeout: 15_000 })
      .toSatisfy((shown: string) => shown !== '' && shown !== before);
    expect(taskId).toMatch(/^t-/);
    return taskId;
  };
  const row = (taskId: string) => page.locator(`[data-testid=task-row][data-task="${taskId}"]`);

  it('asks for a token, then shows the flow, and a goal submitted from the page runs with its rework visible', async () => {
    await page.goto(gateway.url);
    await page.getByTestId('token').fill(TOKEN);
    await page.getByRole('button', { name: 'Open' }).click();
    await page.getByTestId('live').filter({ hasText: 'live' }).waitFor();
    await page.getByTestId('pipeline').selectOption('demo');
    for (const step of ['plan', 'execute', 'review']) await page.getByTestId(`node-${step}`).waitFor();

    const taskId = await submit('demo', 'Write a short hello note');
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const steps = page.getByTestId('timeline-step');
    await expect.poll(() => steps.count(), { timeout: 15_000 }).toBe(5);
    expect(
      await steps.evaluateAll((els) => els.map((e) => `${e.dataset.step}:${e.dataset.verdict}`)),
    ).toEqual(['plan:', 'execute:', 'review:reject', 'execute:', 'review:approve']);
    // A tool call opens to show its arguments and result.
    const call = page.getByTestId('tool-call').first();
    await call.locator('summary').click();
    await expect.poll(() => call.locator('pre.args').textContent()).toContain('path');
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-demo.png'), fullPage: true });
  }, 60_000);

  it('approves a parked tool call from the page, and the task finishes', async () => {
    const taskId = await submit('gated', 'release v1');
    const card = page.locator(`[data-testid=request]`).filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-approval.png'), fullPage: true });
    await card.getByTestId('approve').click();
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    expect(ofKind(h.eventsOf(taskId), 'approval.decided')[0]?.data).toMatchObject({
      decision: 'allow',
      by: 'ops',
    });
    await expect.poll(() => card.count()).toBe(0);
  }, 60_000);

  it('denies one with a reason, and the reason reaches the model', async () => {
    const taskId = await submit('gated', 'release v2');
    const card = page.locator(`[data-testid=request]`).filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    await card.getByTestId('reason').fill('release freeze until Monday');
    await card.getByTestId('deny').click();
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const denied = ofKind(h.eventsOf(taskId), 'tool.result').find((r) => r.data.decision !== 'allow');
    expect(denied?.data.output).toContain('release freeze until Monday');
    await expect
      .poll(() => page.getByTestId('timeline').textContent(), { timeout: 15_000 })
      .toContain('denied by ops');
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-denied.png'), fullPage: true });
  }, 60_000);

  it('answers an agent’s question from the page', async () => {
    const taskId = await submit('asker', 'pick a colour');
    const card = page.locator('[data-testid=request]').filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    await card.getByTestId('answer-text').fill('teal');
    await card.getByTestId('answer').click();
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    expect(ofKind(h.eventsOf(taskId), 'human.answered')[0]?.data).toMatchObject({
      answer: 'teal',
      by: 'ops',
    });
  }, 60_000);

  it('draws a flow with a route and a parallel step: branches on rows of their own, the route’s targets apart', async () => {
    await page.goto(gateway.url);
    await page.getByTestId('pipeline').selectOption('triage');
    const box = async (step: string) => {
      const node = page.getByTestId(`node-${step}`).locator('rect');
      await node.waitFor();
      const b = await node.boundingBox();
      if (!b) throw new Error(`node ${step} is not drawn`);
      return b;
    };
    const [triage, fix, build, code, docs, announce] = await Promise.all(
      ['triage', 'fix', 'build', 'code', 'docs', 'announce'].map(box),
    );
    // The branches start in the column after their parallel step, one below the other.
    expect(code?.x).toBeGreaterThan((build?.x ?? 0) + 1);
    expect(docs?.x).toBe(code?.x);
    expect(docs?.y).toBeGreaterThan((code?.y ?? 0) + 1);
    // What follows the parallel step comes after its branches, on the first row.
    expect(announce?.x).toBeGreaterThan((code?.x ?? 0) + 1);
    expect(announce?.y).toBe(triage?.y);
    expect(fix?.x).toBeGreaterThan((triage?.x ?? 0) + 1);
    const labels = await page.getByTestId('flow-graph').locator('.edge text').allTextContents();
    expect(labels).toEqual(expect.arrayContaining(['= bug', '= feature', 'branch code', 'branch docs']));
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-triage.png'), fullPage: true });
  }, 60_000);

  it('shows the flow’s shape in a timeline: the route, branches and their join, items, a failed step and the sub-task', async () => {
    await page.goto(gateway.url);
    const taskId = await submit('shaped', 'Add an export command');
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const timeline = page.getByTestId('timeline');
    const subTask = timeline.getByTestId('timeline-subtask');
    await expect.poll(() => subTask.textContent(), { timeout: 15_000 }).toMatch(/· outline · completed/);
    expect(
      await subTask.getByTestId('timeline-step').evaluateAll((els) => els.map((e) => e.dataset.step)),
    ).toEqual(['outline']);
    expect(await timeline.getByTestId('timeline-mark').allTextContents()).toEqual([
      'route triage → build · "feature" matched',
      'hand-off from the join of build → builder (part)',
      'hand-off from the join of build → builder (part)',
      'hand-off from the join of each → wrapper (wrap)',
    ]);
    const groups = timeline.getByTestId('timeline-group');
    expect(await groups.evaluateAll((els) => els.map((e) => e.dataset.step))).toEqual(['build', 'each']);
    const build = groups.and(page.locator('[data-step=build]'));
    expect(await build.locator('.step-head').first().textContent()).toMatch(
      /build · parallel · joined \(all\) · ok/,
    );
    const docs = build.getByTestId('timeline-lane').and(page.locator('[data-lane=docs]'));
    expect(await docs.locator('.lane-head').textContent()).toMatch(
      /^branch docs · failed: .*the docs site is down/,
    );
    expect(await docs.getByTestId('timeline-step').locator('.step-head').textContent()).toMatch(
      /docs · writer · round 1 · failed \(scripted_failure\)/,
    );
    const items = groups.and(page.locator('[data-step=each]')).getByTestId('timeline-lane');
    expect(await items.locator('.lane-head').allTextContents()).toEqual([
      'item 0: "parser"',
      'item 1: "storage"',
    ]);
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-trace-shape.png'), fullPage: true });
  }, 60_000);
});
