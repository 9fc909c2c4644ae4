/// <reference lib="dom" />
// What the dashboard's browser tests (test/dashboard.test.ts, test/dashboardViews.test.ts) share. The callbacks given
// to `evaluate` run in the page, with its DOM.
import type { Page } from 'playwright-core';
import { expect } from 'vitest';

/** The dot graph.ts draws along an arrow at each hand-over, for 1.5 s. */
const HANDOVER_DOT = '.flow circle.message';

/**
 * A full-page screenshot of the page at rest: taken once every hand-over's dot has faded, so no dot is caught
 * mid-flight. The check after it fails if one started while the picture was taken.
 */
export async function screenshotAtRest(page: Page, path: string): Promise<void> {
  await expect.poll(() => page.locator(HANDOVER_DOT).count(), { timeout: 5_000 }).toBe(0);
  await page.screenshot({ path, fullPage: true });
  expect(await page.locator(HANDOVER_DOT).count(), `a hand-over's dot is in ${path}`).toBe(0);
}
