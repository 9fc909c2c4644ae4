/// <reference lib="dom" />
// The browser-side callbacks below run in the page, with its DOM.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { type Browser, chromium, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshotAtRest } from './support/dashboard.ts';
import { examplePath, fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const TOKEN = 'dashboard-token-0123456789abcdef';
/** A screenshot of each view, committed for people to look at (README shows dashboard.png, docs/gateway.md the rest). */
const SHOTS = join(import.meta.dirname, '..', 'docs', 'img');
const shot = (name: string) => join(SHOTS, `${name}.png`);
/** The colours style.css gives an approval's and a rejection's text (--ok, --bad). */
const OK_COLOUR = 'rgb(31, 138, 76)';
const BAD_COLOUR = 'rgb(194, 54, 47)';

/** WCAG's contrast ratio of an element's text colour against its background colour (both opaque here). */
const contrast = (locator: Locator) =>
  locator.evaluate((el) => {
    const luminance = (colour: string) => {
      const [r, g, b] = (colour.match(/[\d.]+/g) ?? []).slice(0, 3).map((v) => {
        const c = Number(v) / 255;
        return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * (r ?? 0) + 0.7152 * (g ?? 0) + 0.0722 * (b ?? 0);
    };
    const style = getComputedStyle(el);
    const [a, b] = [luminance(style.color), luminance(style.backgroundColor)];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  });

/** Whatever sticks out of its box sideways: elements whose content is wider than they are, and the page itself. */
const sidewaysScroll = (page: Page, selector: string) =>
  page.evaluate((selector) => {
    const over = [...document.querySelectorAll(selector)]
      .filter((el) => el.scrollWidth > el.clientWidth)
      .map((el) => `${el.className}: ${el.scrollWidth} > ${el.clientWidth}`);
    const root = document.documentElement;
    return root.scrollWidth > root.clientWidth
      ? [...over, `page: ${root.scrollWidth} > ${root.clientWidth}`]
      : over;
  }, selector);

/**
 * The flow graph's edge labels that are not drawn whole: outside the drawing, or under a node or another label.
 * Empty when every label shows; `labels` counts them, so a graph without any cannot pass for one with all shown.
 */
const hiddenLabels = (page: Page) =>
  page.getByTestId('flow-graph').evaluate((svg) => {
    const box = (el: Element) => el.getBoundingClientRect();
    const meets = (a: DOMRect, b: DOMRect) =>
      a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
    const frame = box(svg);
    const nodes = [...svg.querySelectorAll('.node rect')].map(box);
    const labels = [...svg.querySelectorAll('.edge text')].map((t) => ({
      text: t.textContent ?? '',
      at: box(t),
    }));
    const hidden = labels.flatMap(({ text, at }, i) => [
      ...(at.left < frame.left - 0.5 ||
      at.right > frame.right + 0.5 ||
      at.top < frame.top - 0.5 ||
      at.bottom > frame.bottom + 0.5
        ? [`${text}: outside the drawing`]
        : []),
      ...(nodes.some((n) => meets(n, at)) ? [`${text}: under a node`] : []),
      ...(labels.some((other, j) => j !== i && meets(other.at, at)) ? [`${text}: on another label`] : []),
    ]);
    return { labels: labels.length, hidden };
  });

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
      fixturePath('longflow.yaml'),
      fixturePath('reworked.yaml'),
    ]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens: new TokenStore([{ name: 'ops', sha256: hashToken(TOKEN), scopes: ['admin'] }]),
      port: 0,
    });
    await mkdir(SHOTS, { recursive: true });
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
  const snap = (name: string) => screenshotAtRest(page, shot(name));

  it('asks for a token, then shows the flow, and a goal submitted from the page runs with its rework visible', async () => {
    await page.goto(gateway.url);
    // The command that makes a token reads as typed, not as HTML escapes.
    const prompt = page.locator('form.token');
    await expect.poll(() => prompt.textContent()).toContain('troupe token <name> makes one');
    expect(await prompt.textContent()).not.toContain('&lt;');
    await snap('dashboard-login');
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
    // A verdict's feedback is drawn in the verdict's colour: a reject's red, an approval's green.
    const feedback = (verdict: string) =>
      steps
        .and(page.locator(`[data-verdict=${verdict}]`))
        .locator('.feedback')
        .evaluate((el) => getComputedStyle(el).color);
    expect(await feedback('reject')).toBe(BAD_COLOUR);
    expect(await feedback('approve')).toBe(OK_COLOUR);
    expect(await page.locator('.timeline .totals').textContent()).toMatch(
      /^11 model calls · \d+→\d+ tok · \$0\.0000 · 6 tool calls · \d/,
    );
    // A tool call opens to show its arguments and result.
    const call = page.getByTestId('tool-call').first();
    await call.locator('summary').click();
    await expect.poll(() => call.locator('pre.args').textContent()).toContain('path');
    expect(await sidewaysScroll(page, 'section')).toEqual([]);
    // The task's detail sits beside the task list, however many panels follow the list on the left.
    const top = async (selector: string) => (await page.locator(selector).boundingBox())?.y;
    expect(await top('section.detail')).toBe(await top('section.tasks'));
    await snap('dashboard');
  }, 60_000);

  it('approves a parked tool call from the page, and the task finishes', async () => {
    const taskId = await submit('gated', 'release v1');
    const card = page.locator(`[data-testid=request]`).filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    await card.getByTestId('reason').fill('not before the changelog');
    // Deny's label stands out from its red: WCAG AA asks 4.5 to 1 for text this size.
    expect(await contrast(card.getByTestId('deny'))).toBeGreaterThanOrEqual(4.5);
    expect(await contrast(card.getByTestId('approve'))).toBeGreaterThanOrEqual(4.5);
    await snap('dashboard-approval');
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
    // One space on each side of every ·, and one approval in the singular.
    await expect
      .poll(() => page.locator('.timeline .totals').textContent())
      .toMatch(/^2 model calls · \d+→\d+ tok · \$0\.0000 · 2 tool calls · 1 approval · \d/);
    await snap('dashboard-denied');
  }, 60_000);

  it('answers an agent’s question from the page', async () => {
    // The first trace asked for may come before a coordinator has recorded the task, as a 404: that is no error to
    // show, and the task's events load it again.
    let asked = 0;
    await page.route('**/v1/tasks/*/trace', (route) =>
      asked++ === 0
        ? route.fulfill({
            status: 404,
            contentType: 'application/json',
            body: JSON.stringify({
              error: { code: 'not_found', message: 'no task t-x is known on this server' },
            }),
          })
        : route.continue(),
    );
    const taskId = await submit('asker', 'pick a colour');
    expect(asked).toBeGreaterThanOrEqual(2);
    expect(await page.getByRole('alert').count()).toBe(0);
    await page.unrouteAll({ behavior: 'wait' });
    const card = page.locator('[data-testid=request]').filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    await snap('dashboard-question');
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
    // Every label shows whole, and the eight columns fit a 1400-pixel window.
    expect(await hiddenLabels(page)).toEqual({ labels: 4, hidden: [] });
    expect(await sidewaysScroll(page, 'section')).toEqual([]);
    await snap('dashboard-triage');
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
    // Its graph (a route, a parallel and a foreach step with a long `each of` label, a sub-pipeline) fits, labels whole.
    const graph = await hiddenLabels(page);
    expect(graph.hidden).toEqual([]);
    expect(graph.labels).toBeGreaterThanOrEqual(5);
    expect(await sidewaysScroll(page, 'section')).toEqual([]);
    await snap('dashboard-trace-shape');
  }, 60_000);

  it('draws a seven-step flow to fit a 1400-pixel window, at a size that reads, its labels whole', async () => {
    await page.goto(gateway.url);
    await page.getByTestId('pipeline').selectOption('longflow');
    await page.getByTestId('node-publish').waitFor();
    expect(await sidewaysScroll(page, 'section')).toEqual([]);
    expect(await hiddenLabels(page)).toEqual({ labels: 2, hidden: [] });
    // Drawn at no less than four fifths of its size: its 12- and 13-pixel names stay readable.
    const scale = await page
      .getByTestId('flow-graph')
      .evaluate((svg) => svg.getBoundingClientRect().width / (svg as SVGSVGElement).viewBox.baseVal.width);
    expect(scale).toBeGreaterThanOrEqual(0.8);
    // The nodes run left to right on one row, the end last.
    const lefts = await Promise.all(
      ['research', 'outline', 'draft', 'illustrate', 'fact-check', 'translate', 'publish'].map(
        async (step) =>
          (await page.getByTestId(`node-${step}`).locator('rect').boundingBox())?.x ?? Number.NaN,
      ),
    );
    expect(lefts).toEqual([...lefts].sort((a, b) => a - b));
    await snap('dashboard-long-flow');
  }, 60_000);

  it('draws a rework that goes back past a parallel step below its lower branch, the labels apart', async () => {
    await page.getByTestId('pipeline').selectOption('reworked');
    await page.getByTestId('node-sketch').waitFor();
    expect(await hiddenLabels(page)).toEqual({ labels: 4, hidden: [] });
    const reject = await page.locator('.flow .edge.reject path').boundingBox();
    const sketch = await page.getByTestId('node-sketch').locator('rect').boundingBox();
    expect(reject?.y ?? 0).toBeGreaterThan(0);
    expect((reject?.y ?? 0) + (reject?.height ?? 0)).toBeGreaterThan(
      (sketch?.y ?? 0) + (sketch?.height ?? 0) + 10,
    );
    await snap('dashboard-rework');
  }, 60_000);

  it('keeps a long goal inside the task list, cut with its whole text as a title, and wraps it in the timeline', async () => {
    const goal = `Write a note that quotes ${'https://example.com/'.padEnd(160, 'x')} and explains, in more words than any table cell has room for, what it is about`;
    const taskId = await submit('demo', goal);
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const cell = row(taskId).locator('td.goal');
    expect(await cell.getAttribute('title')).toBe(goal);
    // Shown on two lines at most, the rest cut.
    expect(
      await cell.locator('div').evaluate((el) => ({
        lines: Math.round(el.clientHeight / Number.parseFloat(getComputedStyle(el).lineHeight)),
        cut: el.scrollHeight > el.clientHeight,
      })),
    ).toEqual({ lines: 2, cut: true });
    await expect.poll(() => page.getByTestId('timeline').locator('p.goal').textContent()).toBe(goal);
    expect(await sidewaysScroll(page, 'section')).toEqual([]);
    await snap('dashboard-long-goal');
  }, 60_000);

  it('says when an approval expires in whole units: 299.6 seconds is 5 min 0 s', async () => {
    const taskId = await submit('gated', 'release v3');
    const card = page.locator('[data-testid=request]').filter({ hasText: taskId });
    await card.waitFor({ timeout: 30_000 });
    const pending = (await (
      await fetch(`${gateway.url}/v1/approvals`, { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as { requests: { taskId: string; expiresAt: string }[] };
    const expiresAt = Date.parse(pending.requests.find((r) => r.taskId === taskId)?.expiresAt ?? '');
    // A page of its own whose clock reads 299.6 s before the deadline (a fixed clock stays with its page).
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    try {
      const early = await context.newPage();
      await early.clock.setFixedTime(expiresAt - 299_600);
      await early.goto(gateway.url);
      await early.getByTestId('token').fill(TOKEN);
      await early.getByRole('button', { name: 'Open' }).click();
      const shown = early.locator('[data-testid=request]').filter({ hasText: taskId });
      await expect.poll(() => shown.textContent(), { timeout: 15_000 }).toContain('expires in 5 min 0 s');
    } finally {
      await context.close();
    }
    // On a page with the real clock, the deadline counts down while nothing else happens.
    const first = await card.getByTestId('expires').textContent();
    expect(first).toMatch(/^expires in \d+(\.\d)? s$/);
    await expect.poll(() => card.getByTestId('expires').textContent(), { timeout: 5_000 }).not.toBe(first);
    await card.getByTestId('approve').click();
    await row(taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
  }, 60_000);
});
