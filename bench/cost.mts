/**
 * What prompt caching saves per task (issue 35): the pipeline of bench/fixtures/cost/pipeline.yaml (plan → execute →
 * review; long instructions and the file tools' schemas; an executor that works through 10 model calls, 9 of them
 * tool calls whose results go back into its conversation) runs in this process (`troupe run`'s path) against the
 * local fakes of Anthropic and OpenAI (packages/testkit), which count cache reads and writes as each provider does.
 * Each provider runs with its model entry's `cache: off` and `cache: auto`, on a fresh fake (an empty cache), a few
 * tasks one after another; the model's side of a task is bench/fixtures/cost/turns.yaml.
 *
 * It prints, per provider and setting, the input tokens billed per task (fresh, read from the cache, written to it),
 * the share of input read from the cache from the second model call of a step on, and USD per task at the shipped
 * prices of claude-sonnet-4-6 and gpt-5-mini (the PriceTable of @troupe/llm), from the `llm.response` events of the
 * run, then checks the targets: at least 80% read from the second call on, at least 60% lower input cost per
 * task than without a cache. OpenAI caches a prompt of 1,024 tokens or more by itself: `cache: off` only leaves out
 * `prompt_cache_key`, so its row reads from the cache too; "uncached" prices every input token at the input price.
 *
 *   node scripts/bench.mjs cost [tasks=3] [--calls]        (npm run bench:cost -- [tasks] [--calls])
 *
 * --calls prints each model call's usage as it comes.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools, loadPipeline, runTask } from '@troupe/coordinator';
import { PriceTable, type Usage } from '@troupe/llm';
import type { EventOf, TroupeEvent } from '@troupe/protocol';
import { type FakeModelServer, type FakeReply, startFakeAnthropic, startFakeOpenAI } from '@troupe/testkit';
import { parse } from 'yaml';

const args = process.argv.slice(2);
const eachCall = args.includes('--calls');
const tasksArg = args.find((arg) => !arg.startsWith('--'));
const tasks = Number(tasksArg ?? 3);
if (!Number.isInteger(tasks) || tasks < 1)
  throw new Error(`tasks must be a whole number ≥ 1, not ${tasksArg}`);

const fixtures = join(import.meta.dirname, 'fixtures', 'cost');
const template = await readFile(join(fixtures, 'pipeline.yaml'), 'utf8');
const turns = parse(await readFile(join(fixtures, 'turns.yaml'), 'utf8')) as Turns;
const prices = new PriceTable();
// The fakes take any key; the pipeline names this variable so the providers have one to send.
process.env.TROUPE_BENCH_KEY = 'bench';

interface Turns {
  planner: string;
  executor: ({ tool: string; arguments: unknown } | { content: string })[];
  reviewer: { decision: string; feedback: string };
}

type Provider = 'anthropic' | 'openai';
type Cache = 'off' | 'auto';

const PROVIDERS: Record<Provider, { model: string; start: () => Promise<FakeModelServer> }> = {
  anthropic: { model: 'claude-sonnet-4-6', start: () => startFakeAnthropic() },
  openai: { model: 'gpt-5-mini', start: () => startFakeOpenAI() },
};

/** The fake's replies for one task, in the order the pipeline asks for them. */
function repliesOf(provider: Provider): FakeReply[] {
  const executor = turns.executor.map(
    (turn): FakeReply =>
      'tool' in turn
        ? { kind: 'message', toolCalls: [{ name: turn.tool, arguments: JSON.stringify(turn.arguments) }] }
        : { kind: 'message', content: turn.content },
  );
  // A reviewer's verdict comes as a forced tool call on Anthropic, as structured output on OpenAI.
  const verdict = JSON.stringify(turns.reviewer);
  const review: FakeReply =
    provider === 'anthropic'
      ? { kind: 'message', toolCalls: [{ name: 'verdict', arguments: verdict }] }
      : { kind: 'message', content: verdict };
  return [{ kind: 'message', content: turns.planner }, ...executor, review];
}

/** Input tokens of the calls counted, split as billed. */
interface Tally {
  calls: number;
  input: number;
  read: number;
  write: number;
  write1h: number;
  inputUsd: number;
  totalUsd: number;
  /** Of the calls after the first of their step. */
  laterInput: number;
  laterRead: number;
}

const emptyTally = (): Tally => ({
  calls: 0,
  input: 0,
  read: 0,
  write: 0,
  write1h: 0,
  inputUsd: 0,
  totalUsd: 0,
  laterInput: 0,
  laterRead: 0,
});

function count(tally: Tally, reply: EventOf<'llm.response'>['data']): void {
  const usage: Usage = { ...reply.usage };
  if (eachCall) {
    const { inputTokens, cachedTokens, cacheWriteTokens = 0 } = usage;
    const fresh = inputTokens - cachedTokens - cacheWriteTokens;
    console.log(
      `  ${reply.provider} ${reply.stepId} call ${reply.turn}: ${inputTokens} input = ${fresh} fresh + ${cachedTokens} read + ${cacheWriteTokens} written`,
    );
  }
  tally.calls += 1;
  tally.input += usage.inputTokens;
  tally.read += usage.cachedTokens;
  tally.write += usage.cacheWriteTokens ?? 0;
  tally.write1h += usage.cacheWrite1hTokens ?? 0;
  tally.inputUsd += prices.cost(reply.provider, reply.model, { ...usage, outputTokens: 0 });
  tally.totalUsd += prices.cost(reply.provider, reply.model, usage);
  if (reply.turn >= 2) {
    tally.laterInput += usage.inputTokens;
    tally.laterRead += usage.cachedTokens;
  }
}

/** Runs `tasks` tasks of the pipeline on a fresh fake of `provider` with `cache`, and tallies their model calls. */
async function measure(provider: Provider, cache: Cache): Promise<Tally> {
  const { model, start } = PROVIDERS[provider];
  const fake = await start();
  const dir = await mkdtemp(join(tmpdir(), `troupe-bench-cost-${provider}-${cache}-`));
  try {
    const slots: Record<string, string> = { provider, model, cache, baseURL: fake.baseURL };
    const file = join(dir, 'pipeline.yaml');
    await writeFile(
      file,
      template.replace(/\{\{(\w+)\}\}/g, (_, name: string) => slots[name] ?? ''),
    );
    const pipeline = await loadPipeline(file, { toolNames: builtinTools().names() });
    const tally = emptyTally();
    for (let i = 0; i < tasks; i++) {
      fake.enqueue(...repliesOf(provider));
      const { final } = await runTask({
        pipeline,
        // Each task its own goal, as in real use: what follows the task in the prompt is never shared between tasks.
        goal: `Write the release notes of 2.${4 + i}.0: the trace endpoint, task metadata, paginated runs, POST /v1/run deprecated.`,
        taskId: `cost-${i}`,
        workspaceRoot: join(dir, 'work'),
        onEvent: (event: TroupeEvent) => {
          if (event.kind === 'llm.response') count(tally, event.data);
        },
      });
      if (final.kind !== 'task.completed') {
        throw new Error(
          `${provider} cache ${cache}: task ${i} ended ${final.kind}: ${JSON.stringify(final.data)}`,
        );
      }
    }
    return tally;
  } finally {
    await fake.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

const rows: { provider: Provider; cache: Cache; tally: Tally }[] = [];
for (const provider of ['anthropic', 'openai'] as const) {
  for (const cache of ['off', 'auto'] as const)
    rows.push({ provider, cache, tally: await measure(provider, cache) });
}

/** Input USD per task with every input token at the input price. */
function uncachedUsd(provider: Provider, tally: Tally): number {
  const price = prices.priceOf(provider, PROVIDERS[provider].model);
  return ((price?.input ?? 0) * tally.input) / 1_000_000 / tasks;
}

const perTask = (n: number) => Math.round(n / tasks).toLocaleString('en-US');
const percent = (part: number, whole: number) => (whole === 0 ? 0 : (100 * part) / whole);
const usd = (n: number) => `$${n.toFixed(4)}`;
const table = [
  [
    'provider',
    'model',
    'cache',
    'calls',
    'input tok',
    'fresh',
    'cache read',
    'cache write (1h)',
    'read, call ≥2',
    'input $',
    'total $',
    'input $ vs uncached',
  ],
  ...rows.map(({ provider, cache, tally }) => [
    provider,
    PROVIDERS[provider].model,
    cache,
    perTask(tally.calls),
    perTask(tally.input),
    perTask(tally.input - tally.read - tally.write),
    perTask(tally.read),
    `${perTask(tally.write)} (${perTask(tally.write1h)})`,
    `${percent(tally.laterRead, tally.laterInput).toFixed(1)}%`,
    usd(tally.inputUsd / tasks),
    usd(tally.totalUsd / tasks),
    `${(percent(tally.inputUsd / tasks, uncachedUsd(provider, tally)) - 100).toFixed(1)}%`,
  ]),
];
const widths = table[0]?.map((_, column) => Math.max(...table.map((row) => row[column]?.length ?? 0))) ?? [];
console.log(
  `Prompt caching: cost per task (${tasks} tasks per row; figures per task; $ at the shipped prices)\n`,
);
for (const [i, row] of table.entries()) {
  console.log(
    row
      .map((cell, column) => (column < 3 ? cell.padEnd : cell.padStart).call(cell, widths[column] ?? 0))
      .join('  '),
  );
  if (i === 0) console.log(widths.map((width) => '─'.repeat(width)).join('  '));
}

console.log('\nTargets (issue 35), with cache auto:');
let missed = 0;
for (const { provider, tally } of rows.filter((row) => row.cache === 'auto')) {
  const share = percent(tally.laterRead, tally.laterInput);
  const saved = 100 - percent(tally.inputUsd / tasks, uncachedUsd(provider, tally));
  const checks = [
    { what: 'of input read from the cache from the 2nd call of a step on', value: share, target: 80 },
    { what: 'lower input cost per task than uncached', value: saved, target: 60 },
  ];
  for (const { what, value, target } of checks) {
    const met = value >= target;
    if (!met) missed += 1;
    console.log(
      `  ${provider.padEnd(9)} ${value.toFixed(1).padStart(5)}% ${what} (≥ ${target}%): ${met ? 'met' : 'NOT met'}`,
    );
  }
}
process.exitCode = missed === 0 ? 0 : 1;
