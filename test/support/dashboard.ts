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

/** How the task list draws one task's goal. */
export interface GoalShown {
  task: string;
  goal: string;
  /** The goal's text on its first line, as drawn. */
  firstLine: string;
  /** Its words that are broken across two lines. */
  split: string[];
}

/** Each task row's goal, as the browser has laid it out: what its first line holds and which words it breaks. */
export const goalsShown = (page: Page): Promise<GoalShown[]> =>
  page.locator('[data-testid=task-row]').evaluateAll((rows) =>
    rows.map((row) => {
      const box = row.querySelector('td.goal > div');
      const text = box?.firstChild;
      const goal = text?.textContent ?? '';
      // The line each character is drawn on, by the top of its box (a space at a line's end may have none).
      const tops = [...goal].map((_, i) => {
        if (!text) return undefined;
        const range = document.createRange();
        range.setStart(text, i);
        range.setEnd(text, i + 1);
        const rect = range.getClientRects()[0];
        return rect ? Math.round(rect.top) : undefined;
      });
      const first = tops.find((top) => top !== undefined);
      const firstLine = [...goal]
        .filter((_, i) => tops[i] === first)
        .join('')
        .trim();
      const split: string[] = [];
      for (const word of goal.matchAll(/\S+/g)) {
        const lines = new Set(
          tops.slice(word.index, word.index + word[0].length).filter((top) => top !== undefined),
        );
        if (lines.size > 1) split.push(word[0]);
      }
      return { task: (row as HTMLElement).dataset.task ?? '', goal, firstLine, split };
    }),
  );
