import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { PriceTable } from '@troupe/llm';
import type { TroupeEvent } from '@troupe/protocol';
import { createLogger, TroupeMetrics } from '@troupe/runtime';
import { type FakeModelServer, startFakeAnthropic } from '@troupe/testkit';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

const KEY = 'sk-ant-test-cache-0123';
const TOKEN = 'cache-cost-token-0123456789abcdef';
/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const MODEL = 'claude-sonnet-4-6';

describe('prompt cache reads and writes, from the provider’s reply to what people see', () => {
  let anthropic: FakeModelServer;
  let dir: string;
  let h: Harness;
  let events: TroupeEvent[];
  let final: TroupeEvent;

  beforeAll(async () => {
    anthropic = await startFakeAnthropic();
    dir = await mkdtemp(join(tmpdir(), 'troupe-cache-cost-'));
    await writeFile(
      join(dir, 'cached.yaml'),
      `version: 1
name: cached
models:
  claude: { provider: anthropic, model: ${MODEL}, baseURL: "${anthropic.baseURL}", maxAttempts: 1 }
defaults: { model: claude }
agents:
  planner: { instructions: Plan the work. }
  coder: { instructions: Write the files., tools: [write_file] }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: code, kind: agent, agent: coder }
`,
    );
    h = await startHarness([join(dir, 'cached.yaml')], { env: { ANTHROPIC_API_KEY: KEY } });
    // As Anthropic counts them: `inputTokens` is the part of the prompt neither read from the cache nor written to it.
    anthropic.enqueue(
      {
        kind: 'message',
        content: '1. write a.md',
        usage: { inputTokens: 100, outputTokens: 40, cacheWriteTokens: 1_000 },
      },
      {
        kind: 'message',
        toolCalls: [
          { id: 'toolu_a', name: 'write_file', arguments: JSON.stringify({ path: 'a.md', content: 'A' }) },
        ],
        usage: { inputTokens: 50, outputTokens: 30, cachedTokens: 1_000, cacheWriteTokens: 400 },
      },
      {
        kind: 'message',
        content: 'wrote a.md',
        usage: { inputTokens: 20, outputTokens: 10, cachedTokens: 1_400, cacheWriteTokens: 60 },
      },
    );
    publishTask(h, 'cached', { id: 'cache-1', goal: 'write a.md' });
    final = await h.finalOf('cache-1');
    events = h.eventsOf('cache-1');
  });
  afterAll(async () => {
    await h?.stop();
    await anthropic?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('counts and prices each call’s reads and writes, and sums them per step, agent and task', async () => {
    expect(final.kind).toBe('task.completed');
    // Ours counts the whole prompt as input, reads and writes parts of it.
    const calls = ofKind(events, 'llm.response');
    expect(calls.map((c) => c.data.usage)).toEqual([
      { inputTokens: 1_100, outputTokens: 40, cachedTokens: 0, cacheWriteTokens: 1_000 },
      { inputTokens: 1_450, outputTokens: 30, cachedTokens: 1_000, cacheWriteTokens: 400 },
      { inputTokens: 1_480, outputTokens: 10, cachedTokens: 1_400, cacheWriteTokens: 60 },
    ]);
    const prices = new PriceTable();
    for (const call of calls)
      expect(call.data.costUsd).toBeCloseTo(prices.cost('anthropic', MODEL, call.data.usage), 12);
    const spent = calls.reduce((sum, c) => sum + c.data.costUsd, 0);

    const code = ofKind(events, 'step.completed').find((s) => s.data.step === 'code');
    expect(code?.data.usage).toMatchObject({
      inputTokens: 2_930,
      cachedTokens: 2_400,
      cacheWriteTokens: 460,
    });
    if (final.kind !== 'task.completed') return;
    expect(final.data.usage).toMatchObject({
      inputTokens: 4_030,
      outputTokens: 80,
      cachedTokens: 2_400,
      cacheWriteTokens: 1_460,
      modelCalls: 3,
    });
    expect(final.data.usage.costUsd).toBeCloseTo(spent, 12);
    expect(final.data.usageByAgent.planner).toMatchObject({ cachedTokens: 0, cacheWriteTokens: 1_000 });

    const metrics = new TroupeMetrics();
    for (const event of events) metrics.observe(event);
    const text = await metrics.registry.metrics();
    const series = (type: string) =>
      `troupe_model_tokens_total{provider="anthropic",model="${MODEL}",type="${type}"}`;
    expect(text).toContain(`${series('cached')} 2400\n`);
    expect(text).toContain(`${series('cache_write')} 1460\n`);
  });

  it('shows them apart in troupe trace and troupe runs', async () => {
    const env = cliEnv({ NATS_URL: h.nats.url });
    const trace = await troupe(['trace', 'cache-1'], env);
    expect(trace.code, trace.stderr).toBe(0);
    expect(trace.stdout).toContain('turn 1 · 1100→40 tok (1000 cache write) · ');
    expect(trace.stdout).toContain('turn 2 · 1480→10 tok (1400 cache read, 60 cache write) · ');
    expect(trace.stdout).toMatch(
      /totals: 3 model calls · 4030→80 tok \(2400 cache read, 1460 cache write\) · /,
    );
    const runs = await troupe(['runs', '--pipeline', 'cached'], env);
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toMatch(/cache-1 .* 4030→80 \(2400 cache read, 1460 cache write\) /);
  });

  it('shows them apart in the dashboard’s runs list and the task’s timeline', async () => {
    const tokens = new TokenStore([{ name: 'ops', sha256: hashToken(TOKEN), scopes: ['admin'] }]);
    let gateway: Gateway | undefined;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    try {
      gateway = await startGateway({
        bus: h.bus,
        logger: createLogger({ level: 'silent' }),
        tokens,
        port: 0,
        workspaces: h.workspaceRoot,
      });
      const page = await browser.newPage();
      await page.goto(gateway.url);
      await page.getByTestId('token').fill(TOKEN);
      await page.getByRole('button', { name: 'Open' }).click();
      await page.getByTestId('pipeline').selectOption('cached');
      const row = page.locator('[data-testid=task-row][data-task="cache-1"]');
      await row.and(page.locator('[data-status=completed]')).waitFor({ timeout: 15_000 });
      expect(await row.textContent()).toContain('4030→80 tok (2400 cache read, 1460 cache write)');
      await row.click();
      await expect
        .poll(() => page.getByTestId('totals').textContent())
        .toContain('4030→80 tok (2400 cache read, 1460 cache write)');
      expect(await page.getByTestId('timeline').textContent()).toContain(
        '1480→10 tok (1400 cache read, 60 cache write)',
      );
    } finally {
      await browser.close();
      await gateway?.close();
    }
  });
});
