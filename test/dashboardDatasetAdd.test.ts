import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { EvalStore, submitTask } from '@troupe/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshotAtRest } from './support/dashboard.ts';
import { examplePath, type Harness, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ADMIN = 'dashboard-datasets-0123456789abc';
const READER = 'dashboard-datasets-reader-012345';
const LIMITED = 'dashboard-datasets-limited-01234';
const SHOTS = join(import.meta.dirname, '..', 'docs', 'img');
const TASK = 'notes-kept-1';

describe('the dashboard’s Add to dataset, in a real browser', () => {
  let h: Harness;
  let gateway: Gateway;
  let browser: Browser;
  let page: Page;
  let store: EvalStore;

  beforeAll(async () => {
    h = await startHarness([examplePath('evals/notes.yaml')]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] },
        { name: 'watcher', sha256: hashToken(READER), scopes: ['read'] },
        { name: 'notes-only', sha256: hashToken(LIMITED), scopes: ['submit'], pipelines: ['notes'] },
      ]),
      port: 0,
    });
    await submitTask(h.bus, 'notes', { id: TASK, goal: 'Write the release note for v3.1' });
    expect((await h.finalOf(TASK, 30_000)).kind).toBe('task.completed');
    // A dataset stored before, with one case written by hand: the task is added beside it.
    store = new EvalStore(h.bus);
    await store.putDataset({
      name: 'release-notes',
      scorers: [{ type: 'contains', value: 'release' }],
      cases: [{ id: 'by-hand', goal: 'Write the release note for v1.0' }],
    });
    await mkdir(SHOTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    await h?.stop();
  });

  /** A page signed in with `token`, the task opened. */
  async function openTask(token: string): Promise<Page> {
    const opened = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    await opened.goto(gateway.url);
    await opened.getByTestId('token').fill(token);
    await opened.getByRole('button', { name: 'Open' }).click();
    await opened.locator(`[data-testid=task-row][data-task="${TASK}"]`).click({ timeout: 15_000 });
    await opened.locator(`[data-testid=task-row][data-task="${TASK}"].selected`).waitFor({ timeout: 15_000 });
    await opened.locator('main:not([hidden])').getByTestId('timeline').waitFor({ timeout: 15_000 });
    return opened;
  }

  it('adds an ended task to a dataset picked from those stored, and to one named anew, showing each version', async () => {
    page = await openTask(ADMIN);
    await page.getByTestId('dataset-add-open').click();
    // The datasets stored are offered to pick from.
    await expect
      .poll(() =>
        page.locator('#dataset-names option').evaluateAll((os) => os.map((o) => o.getAttribute('value'))),
      )
      .toEqual(['release-notes']);
    const name = page.getByTestId('dataset-name');
    const confirm = page.getByTestId('dataset-add-confirm');
    await name.fill('Release Notes');
    expect(await confirm.isDisabled()).toBe(true);
    await name.fill('release-notes');
    await confirm.click();
    const added = page.getByTestId('dataset-added');
    await added.waitFor({ timeout: 30_000 });
    expect(await added.textContent()).toBe(
      'Stored dataset release-notes version 2: 2 cases (1 recorded); this task added since version 1',
    );
    await screenshotAtRest(page, join(SHOTS, 'dashboard-add-to-dataset.png'));
    const stored = await store.dataset('release-notes');
    expect(stored?.scorers).toEqual([{ type: 'contains', value: 'release' }]);
    expect(stored?.cases.map((c) => c.id)).toEqual(['by-hand', TASK]);
    const recording = stored?.cases[1]?.recording;
    expect(recording?.taskId).toBe(TASK);
    expect(recording?.events[0]?.kind).toBe('task.accepted');
    expect(recording?.events.at(-1)?.kind).toBe('task.completed');

    await page.getByTestId('dataset-add-open').click();
    await name.fill('from-dashboard');
    await confirm.click();
    await expect
      .poll(() => added.textContent(), { timeout: 30_000 })
      .toBe('Stored dataset from-dashboard version 1: 1 case (1 recorded); this task added, a new dataset');
    expect((await store.dataset('from-dashboard'))?.cases.map((c) => c.id)).toEqual([TASK]);
  }, 90_000);

  it('does not offer it to a token that may not submit on the task’s pipeline, nor to one limited to pipelines', async () => {
    // A limited token may submit on the task's pipeline, but a dataset may hold any pipeline's runs: the gateway
    // refuses it (403), so the page does not offer it.
    for (const token of [READER, LIMITED]) {
      const page = await openTask(token);
      // Until the page has read what the token may do, it offers the action (the gateway would refuse it).
      await expect.poll(() => page.getByTestId('dataset-add-open').count(), { timeout: 15_000 }).toBe(0);
      expect(await page.getByTestId('dataset-add').count()).toBe(0);
    }
  }, 90_000);
});
