import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { type Browser, type BrowserContext, chromium, type Page, type Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { goalsShown, screenshotAtRest } from './support/dashboard.ts';
import { examplePath, fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ADMIN = 'dashboard-admin-0123456789abcdef';
const READER = 'dashboard-reader-0123456789abcdef';
const CI = 'dashboard-ci-0123456789abcdef01';
/** A screenshot of each view, where docs/gateway.md links them: a change to the page shows in review. */
const SHOTS = join(import.meta.dirname, '..', 'docs', 'img');
const shot = (name: string) => join(SHOTS, `${name}.png`);

const tokenEntries = (ciScopes: string[]) =>
  JSON.stringify({
    tokens: [
      { name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] },
      { name: 'watcher', sha256: hashToken(READER), scopes: ['read'] },
      { name: 'ci', sha256: hashToken(CI), scopes: ciScopes },
    ],
  });

describe('the dashboard’s task actions, output and sessions, in a real browser', () => {
  let h: Harness;
  let gateway: Gateway;
  /** A gateway that holds no workspaces. */
  let elsewhere: Gateway | undefined;
  let tokens: TokenStore;
  let tokensFile: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('gated.yaml'),
      fixturePath('reporter.yaml'),
      examplePath('demo.yaml'),
    ]);
    tokensFile = join(await mkdtemp(join(tmpdir(), 'troupe-dash-')), 'tokens.json');
    await writeFile(tokensFile, tokenEntries(['submit']));
    tokens = await TokenStore.load(tokensFile, {});
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens,
      port: 0,
      workspaces: h.workspaceRoot,
    });
    await mkdir(SHOTS, { recursive: true });
    // Tests run as root in CI containers, where Chromium's own sandbox cannot start.
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url });
    page = await context.newPage();
    await signIn(page, ADMIN);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await elsewhere?.close();
    await gateway?.close();
    await h?.stop();
    if (tokensFile) await rm(join(tokensFile, '..'), { recursive: true, force: true });
  });

  async function signIn(on: Page, token: string) {
    await on.goto(gateway.url);
    await on.getByTestId('token').fill(token);
    await on.getByRole('button', { name: 'Open' }).click();
    await on.getByTestId('live').filter({ hasText: 'live' }).waitFor();
  }
  const shownTask = async (on: Page) =>
    (await on.getByTestId('timeline').locator('h3').count()) === 0
      ? ''
      : ((await on.getByTestId('timeline').locator('h3').textContent())?.split(' ')[0] ?? '');
  /** Waits for the timeline to show another task than `before`, and gives its id. */
  const nextShown = async (on: Page, before: string): Promise<string> => {
    let taskId = '';
    await expect
      .poll(async () => (taskId = await shownTask(on)), { timeout: 15_000 })
      .toSatisfy((shown: string) => shown !== '' && shown !== before);
    return taskId;
  };
  const submit = async (on: Page, pipeline: string, goal: string): Promise<string> => {
    const before = await shownTask(on);
    await on.getByTestId('pipeline').selectOption(pipeline);
    await on.getByTestId('goal').fill(goal);
    await on.getByTestId('submit').click();
    return nextShown(on, before);
  };
  const row = (on: Page, taskId: string) => on.locator(`[data-testid=task-row][data-task="${taskId}"]`);
  /** Opens a new session of the pipeline selected, and waits for it to be the one shown. */
  const openNewSession = async () => {
    const shown = page.getByTestId('session');
    const before = (await shown.count()) > 0 ? await shown.getAttribute('data-session') : null;
    await page.getByTestId('new-session').click();
    const session = page.locator('[data-testid=session]:not([data-session=""])');
    let id = '';
    await expect
      .poll(
        async () =>
          (id = (await session.count()) > 0 ? ((await session.getAttribute('data-session')) ?? '') : ''),
      )
      .toSatisfy((now: string) => now !== '' && now !== before);
    return { session: page.locator(`[data-testid=session][data-session="${id}"]`), id };
  };

  it('cancels a running task after asking, and the task ends cancelled in the view', async () => {
    const taskId = await submit(page, 'gated', 'release v9');
    // Parked on its approval: running, and it would stay so for 30 s.
    await page.locator('[data-testid=request]').filter({ hasText: taskId }).waitFor({ timeout: 30_000 });
    await page.getByTestId('cancel').click();
    await expect.poll(() => page.getByTestId('task-actions').textContent()).toContain(`Cancel ${taskId}?`);
    await screenshotAtRest(page, shot('dashboard-cancel'));
    // Keeping it running changes nothing.
    await page.getByTestId('cancel-keep').click();
    expect(await page.getByTestId('cancel-confirm').count()).toBe(0);
    await page.getByTestId('cancel').click();
    await page.getByTestId('cancel-confirm').click();
    await row(page, taskId).and(page.locator('[data-status=cancelled]')).waitFor({ timeout: 15_000 });
    await expect
      .poll(() => page.getByTestId('timeline').locator('h3 .status').textContent(), { timeout: 15_000 })
      .toBe('cancelled');
    expect(ofKind(h.eventsOf(taskId), 'task.cancelled')).toHaveLength(1);
    // Ended, it offers a re-run, not a cancel.
    expect(await page.getByTestId('cancel').count()).toBe(0);
    await page.getByTestId('rerun').waitFor();
  }, 60_000);

  it('re-runs a finished task as a new task with the same goal and input, and opens it', async () => {
    // A task with an input, as a client sends it: the dashboard's form sends goals only.
    const first = await fetch(`${gateway.url}/v1/pipelines/reporter/tasks?wait=30`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        goal: 'Report on Q3',
        input: { quarter: 'Q3', regions: ['north', 'south'] },
        metadata: { ticket: 'OPS-7' },
      }),
    }).then((r) => r.json() as Promise<{ taskId: string; status: string }>);
    expect(first.status).toBe('completed');
    await page.getByTestId('pipeline').selectOption('reporter');
    await row(page, first.taskId).click();
    await page.getByTestId('rerun').waitFor();
    await page.getByTestId('file').first().waitFor();
    await screenshotAtRest(page, shot('dashboard-output'));
    await page.getByTestId('rerun').click();
    const again = await nextShown(page, first.taskId);
    await row(page, again).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const accepted = (id: string) => ofKind(h.eventsOf(id), 'task.accepted')[0]?.data;
    await expect.poll(() => accepted(again)).toBeDefined();
    expect(accepted(again)?.goal).toBe('Report on Q3');
    expect(accepted(again)?.input).toEqual({ quarter: 'Q3', regions: ['north', 'south'] });
    const record = await fetch(`${gateway.url}/v1/tasks/${again}`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    }).then((r) => r.json() as Promise<{ metadata?: Record<string, string> }>);
    expect(record.metadata).toEqual({ ticket: 'OPS-7', rerunOf: first.taskId });
  }, 60_000);

  it('shows a finished task’s output as text, JSON pretty-printed, markup never made into elements, and copies it', async () => {
    const taskId = await submit(page, 'reporter', 'Write the report');
    await row(page, taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const output = page.getByTestId('output');
    await output.waitFor({ timeout: 15_000 });
    const text = (await output.getByTestId('output-text').textContent()) ?? '';
    // Pretty-printed: one key a line, indented.
    expect(text).toBe(
      JSON.stringify(
        {
          summary: `Wrote the report <img src=x onerror="document.body.dataset.pwned='output'">`,
          files: ['notes/report.md', 'data/chart.png'],
        },
        null,
        2,
      ),
    );
    // The markup is text: no element was made of it, and its handler never ran.
    expect(await output.locator('img').count()).toBe(0);
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.locator('body').getAttribute('data-pwned')).toBeNull();
    await output.getByTestId('copy-output').click();
    await expect.poll(() => output.getByTestId('copy-output').textContent()).toBe('Copied');
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(text);
  }, 60_000);

  it('lists sessions, opens one, continues it with a message and follows the new turn live', async () => {
    await page.getByTestId('pipeline').selectOption('reporter');
    const { session, id } = await openNewSession();
    expect(id).not.toBe('');
    await page.locator(`[data-testid=session-row][data-session="${id}"]`).waitFor();

    await session.getByTestId('session-goal').fill('Write the first report');
    await session.getByTestId('session-send').click();
    const turns = session.getByTestId('turn');
    await expect.poll(() => turns.count(), { timeout: 15_000 }).toBe(1);
    await turns.first().and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    expect(await turns.first().getByTestId('output-text').textContent()).toContain('"summary"');

    await session.getByTestId('session-goal').fill('Now add the chart');
    await session.getByTestId('session-send').click();
    await expect.poll(() => turns.count(), { timeout: 15_000 }).toBe(2);
    await turns.nth(1).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const second = (await turns.nth(1).getAttribute('data-task')) ?? '';
    expect(await turns.allTextContents()).toEqual([
      expect.stringContaining('Write the first report'),
      expect.stringContaining('Now add the chart'),
    ]);
    // The second turn ran as the API's follow-up: a task that saw the first turn.
    const input = ofKind(h.eventsOf(second), 'task.accepted')[0]?.data.input as
      | { session?: { earlier?: { goal: string }[] } }
      | undefined;
    expect(input?.session?.earlier).toEqual([expect.objectContaining({ goal: 'Write the first report' })]);
    // The turns' long ids (`s-…-2-…`) leave the goal room to read at 1400 px: a dozen characters or more on its first
    // line (all of a shorter goal), and no word broken across lines.
    const goals = await goalsShown(page);
    expect(goals.filter((g) => g.task.startsWith(`${id}-`))).toHaveLength(2);
    expect(
      goals.filter((g) => g.firstLine.length < Math.min(12, g.goal.length) || g.split.length > 0),
    ).toEqual([]);
    // The id is cut in its middle to make that room, but stays whole in the page: its title, and what is copied.
    const idCell = row(page, second).locator('td.id');
    expect(await idCell.getAttribute('title')).toBe(second);
    expect(
      await idCell.evaluate((td) => {
        const head = td.querySelector('.head') as HTMLElement;
        const selection = getSelection();
        selection?.selectAllChildren(td);
        const copied = selection?.toString();
        selection?.removeAllRanges();
        return { cut: head.scrollWidth > head.clientWidth, copied };
      }),
    ).toEqual({ cut: true, copied: second });
    await screenshotAtRest(page, shot('dashboard-session'));

    // Opened again from the list, after a reload of the page, it shows the same conversation.
    await page.reload();
    await page.getByTestId('pipeline').selectOption('reporter');
    await page.locator(`[data-testid=session-row][data-session="${id}"]`).click();
    await expect.poll(() => page.getByTestId('turn').count(), { timeout: 15_000 }).toBe(2);
    // A turn's task opens its timeline.
    await page.getByTestId('turn').nth(1).getByTestId('turn-task').click();
    expect(await nextShown(page, '')).toBe(second);
  }, 90_000);

  it('shows a turn as ended when it ends before the session is read back, and a late answer does not undo it', async () => {
    await page.getByTestId('pipeline').selectOption('reporter');
    const { session, id } = await openNewSession();
    // A slow network: the session read right after the message answers only once its turn has ended and the page has
    // heard so, with the session as it stood before the turn ended. The gateway's own answer is made stale here (the
    // turn still running, no output), because on a loaded machine the quick turn can end before the read is even asked.
    let hold = true;
    let staleTurns: { status: string }[] = [];
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route(`**/v1/sessions/${id}`, async (route) => {
      if (!hold || route.request().method() !== 'GET') return route.continue();
      hold = false;
      const answer = await route.fetch();
      const body = (await answer.json()) as { turns: { status: string; output?: unknown }[] };
      staleTurns = body.turns.map(({ output: _, ...turn }) => ({ ...turn, status: 'running' }));
      await page
        .locator('[data-testid=task-row][data-status=completed]')
        .filter({ hasText: `${id}-1-` })
        .waitFor({ timeout: 15_000 });
      // The stale read goes on to read its turn's timeline before it is applied, or dropped.
      const traced = page.waitForResponse((r) => r.url().endsWith('/trace') && r.url().includes(`/${id}-1-`));
      await route.fulfill({ response: answer, json: { ...body, turns: staleTurns } });
      await (await traced).finished();
      release();
    });
    try {
      await session.getByTestId('session-goal').fill('A quick one');
      await session.getByTestId('session-send').click();
      await released;
      expect(staleTurns).toEqual([expect.objectContaining({ status: 'running' })]);
      // Once the page has had two frames to apply what it read, the late answer has not undone the turn's end.
      await page.evaluate(
        () => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))),
      );
      expect(await session.getByTestId('turn').getAttribute('data-status')).toBe('completed');
      // Whichever answer came last, the turn shows how it ended.
      await session
        .getByTestId('turn')
        .and(page.locator('[data-status=completed]'))
        .waitFor({ timeout: 15_000 });
    } finally {
      await page.unrouteAll({ behavior: 'wait' });
    }
  }, 60_000);

  it('follows a session’s running turn live, its timeline growing as its events arrive', async () => {
    await page.getByTestId('pipeline').selectOption('gated');
    const { session } = await openNewSession();
    await session.getByTestId('session-goal').fill('release v10');
    await session.getByTestId('session-send').click();
    // Parked on its approval: the turn runs, its timeline is followed, and the box waits for it.
    const following = session.getByTestId('following');
    await expect.poll(() => following.textContent(), { timeout: 30_000 }).toContain('waiting for a person');
    expect(await session.getByTestId('session-send').isDisabled()).toBe(true);
    await screenshotAtRest(page, shot('dashboard-session-following'));
    const turn = session.getByTestId('turn').first();
    const taskId = (await turn.getAttribute('data-task')) ?? '';
    await page.locator('[data-testid=request]').filter({ hasText: taskId }).getByTestId('approve').click();
    await turn.and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    expect(await turn.getByTestId('output-text').textContent()).toBe('Done with the release.');
    expect(await following.count()).toBe(0);
  }, 60_000);

  it('offers no cancel, re-run, new session or decision to a token that may only read', async () => {
    // What the page asks the gateway: the token's name and scopes; no token, no answer.
    const token = (value?: string) =>
      fetch(`${gateway.url}/v1/token`, value ? { headers: { authorization: `Bearer ${value}` } } : {});
    expect(await (await token(READER)).json()).toEqual({ name: 'watcher', scopes: ['read'] });
    expect((await token()).status).toBe(401);
    // A context of its own: the page keeps its token in the origin's local storage.
    const readerContext = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const reader = await readerContext.newPage();
    try {
      await signIn(reader, READER);
      await reader.getByTestId('pipeline').selectOption('reporter');
      await reader.getByTestId('task-row').first().click();
      await reader.getByTestId('timeline').waitFor();
      await reader.getByTestId('output').waitFor();
      expect(await reader.getByTestId('task-actions').count()).toBe(0);
      expect(await reader.getByTestId('new-session').count()).toBe(0);
      await reader.getByTestId('session-row').first().click();
      await reader.getByTestId('session').waitFor();
      expect(await reader.getByTestId('session-goal').count()).toBe(0);

      // An approval waiting is shown to it read-only, saying who may decide: no Approve, Deny or reason box, which
      // the gateway would refuse it.
      const parked = await fetch(`${gateway.url}/v1/pipelines/gated/tasks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ goal: 'release v12' }),
      }).then((r) => r.json() as Promise<{ taskId: string }>);
      try {
        await reader.getByTestId('pipeline').selectOption('gated');
        const card = reader.locator('[data-testid=request]').filter({ hasText: parked.taskId });
        await card.waitFor({ timeout: 30_000 });
        expect(await card.locator('pre.args').textContent()).not.toBe('');
        expect(await card.getByTestId('decided-by').textContent()).toBe(
          'Read-only: a token with the approve or admin scope on gated may approve or deny it (watcher has read).',
        );
        for (const control of ['approve', 'deny', 'reason']) {
          expect(await card.getByTestId(control).count(), control).toBe(0);
        }
        await screenshotAtRest(reader, shot('dashboard-approval-read-only'));
      } finally {
        await fetch(`${gateway.url}/v1/tasks/${parked.taskId}/cancel`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
          body: '{}',
        });
      }
    } finally {
      await readerContext.close();
    }
  }, 60_000);

  it('shows the gateway’s refusal when the token loses the right to cancel, then stops offering it', async () => {
    const ciContext = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const ci = await ciContext.newPage();
    try {
      await signIn(ci, CI);
      const taskId = await submit(ci, 'gated', 'release v11');
      await ci.locator('[data-testid=request]').filter({ hasText: taskId }).waitFor({ timeout: 30_000 });
      await ci.getByTestId('cancel').click();
      // The token is narrowed to read while the question is on the screen.
      await writeFile(tokensFile, tokenEntries(['read']));
      await tokens.reload();
      await ci.getByTestId('cancel-confirm').click();
      await expect
        .poll(() => ci.getByTestId('action-refused').textContent(), { timeout: 15_000 })
        .toBe('The gateway did not cancel it: token ci lacks the submit scope (it has read)');
      await screenshotAtRest(ci, shot('dashboard-cancel-refused'));
      // Told so, the page reads what the token may do again and takes the button away.
      await expect.poll(() => ci.getByTestId('cancel').count(), { timeout: 15_000 }).toBe(0);
      expect(await ci.getByTestId('cancel-confirm').count()).toBe(0);
      await row(ci, taskId).and(ci.locator('[data-status=running]')).waitFor();
    } finally {
      await ciContext.close();
      await writeFile(tokensFile, tokenEntries(['submit']));
      await tokens.reload();
    }
    // Nothing is left parked for the tests after this one.
    const left = await fetch(`${gateway.url}/v1/tasks?pipeline=gated&status=running`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    }).then((r) => r.json() as Promise<{ tasks: { taskId: string }[] }>);
    for (const { taskId } of left.tasks) {
      await fetch(`${gateway.url}/v1/tasks/${taskId}/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: '{}',
      });
    }
  }, 60_000);

  it('lists a finished task’s files, opens a text file as text and saves another', async () => {
    const taskId = await submit(page, 'reporter', 'Write the files');
    await row(page, taskId).and(page.locator('[data-status=completed]')).waitFor({ timeout: 30_000 });
    const files = page.getByTestId('files');
    await expect
      .poll(() => files.getByTestId('file').evaluateAll((els) => els.map((e) => e.dataset.path)), {
        timeout: 15_000,
      })
      .toEqual(['data/chart.png', 'notes/report.md']);
    const report = files.locator('[data-testid=file][data-path="notes/report.md"]');
    await report.getByTestId('file-open').click();
    await expect
      .poll(() => files.getByTestId('file-text').textContent(), { timeout: 15_000 })
      .toBe(
        `# Report\n\nMarkup stays text here too: <b>not bold</b> <img src=x onerror="document.body.dataset.pwned='file'">\n`,
      );
    // The file's markup is text too.
    expect(await files.getByTestId('file-view').locator('b, img').count()).toBe(0);
    expect(await page.locator('body').getAttribute('data-pwned')).toBeNull();
    await screenshotAtRest(page, shot('dashboard-files'));
    // An image is not drawn as text: it is saved, with the token, under its own name.
    const chart = files.locator('[data-testid=file][data-path="data/chart.png"]');
    expect(await chart.getByTestId('file-open').count()).toBe(0);
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      chart.getByTestId('file-download').click(),
    ]);
    expect(download.suggestedFilename()).toBe('chart.png');
    expect(await readFile(await download.path(), 'utf8')).toBe('not really a PNG');
  }, 60_000);

  it('shows the gateway’s word when it does not hold the task’s workspace', async () => {
    // Closed after the browser, in afterAll: a gateway waits for the connections a browser still holds to it.
    elsewhere = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens,
      port: 0,
    });
    const thereContext = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const there = await thereContext.newPage();
    try {
      await there.goto(elsewhere.url);
      await there.getByTestId('token').fill(ADMIN);
      await there.getByRole('button', { name: 'Open' }).click();
      // The page hears of the task only through its event stream, which must be open before the task runs.
      await there.getByTestId('live').filter({ hasText: 'live' }).waitFor();
      const task = await fetch(`${elsewhere.url}/v1/pipelines/reporter/tasks?wait=30`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ goal: 'Write the report elsewhere' }),
      }).then((r) => r.json() as Promise<{ taskId: string; status: string }>);
      expect(task.status).toBe('completed');
      await there.getByTestId('pipeline').selectOption('reporter');
      await row(there, task.taskId).click();
      await expect
        .poll(() => there.getByTestId('files-refused').textContent(), { timeout: 15_000 })
        .toContain('this gateway serves no task workspaces');
      expect(await there.getByTestId('file').count()).toBe(0);
    } finally {
      await thereContext.close();
    }
  }, 60_000);

  it('keeps the sessions of the pipeline chosen when an earlier choice’s list answers after it', async () => {
    await page.getByTestId('pipeline').selectOption('reporter');
    const { id } = await openNewSession();
    // The list of gated's sessions, asked for first, held until reporter's list has been shown.
    let held: Route | undefined;
    await page.route('**/v1/sessions?pipeline=gated', (route) => {
      held = route;
    });
    try {
      await page.reload();
      await page.getByTestId('pipeline').selectOption('gated');
      await expect.poll(() => held !== undefined).toBe(true);
      await page.getByTestId('pipeline').selectOption('reporter');
      await page.locator(`[data-testid=session-row][data-session="${id}"]`).waitFor();
      const late = page.waitForResponse('**/v1/sessions?pipeline=gated');
      const now = new Date().toISOString();
      await held?.fulfill({
        json: {
          sessions: [{ id: 'gated-late', pipeline: 'gated', createdBy: 'x', createdAt: now, updatedAt: now }],
        },
      });
      await (await late).finished();
      // Two frames: the late answer's read and the render it would cause have had their turn.
      await page.evaluate(
        () =>
          new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(undefined)))),
      );
      expect(await page.locator('[data-testid=session-row][data-session="gated-late"]').count()).toBe(0);
      expect(await page.locator(`[data-testid=session-row][data-session="${id}"]`).count()).toBe(1);
    } finally {
      await page.unrouteAll({ behavior: 'wait' });
    }
  }, 60_000);

  it('counts in words: a summary of one earlier turn, a file list cut after one file', async () => {
    await page.getByTestId('pipeline').selectOption('reporter');
    const { id } = await openNewSession();
    // As the gateway gives a session once its summarizer has summed up the first turn.
    await page.route(`**/v1/sessions/${id}`, async (route) => {
      if (route.request().method() !== 'GET') return route.continue();
      const real = await route.fetch();
      const session = (await real.json()) as Record<string, unknown>;
      await route.fulfill({ response: real, json: { ...session, summary: { text: 'A report.', turns: 1 } } });
    });
    // As the gateway lists a workspace holding more files than it lists.
    await page.route('**/v1/tasks/*/files', async (route) => {
      const real = await route.fetch();
      const listing = (await real.json()) as { files: unknown[] };
      await route.fulfill({
        response: real,
        json: { ...listing, files: listing.files.slice(0, 1), truncated: true },
      });
    });
    try {
      await page.reload();
      await page.getByTestId('pipeline').selectOption('reporter');
      await page.locator(`[data-testid=session-row][data-session="${id}"]`).click();
      await expect
        .poll(() => page.getByTestId('session-summary').textContent(), { timeout: 15_000 })
        .toBe('Summed up for later turns: 1 earlier turn.');
      await page.locator('[data-testid=task-row][data-status=completed]').first().click();
      await expect
        .poll(() => page.getByTestId('files-cut').textContent(), { timeout: 15_000 })
        .toBe('The list is cut after 1 file.');
    } finally {
      await page.unrouteAll({ behavior: 'wait' });
    }
  }, 60_000);
});
