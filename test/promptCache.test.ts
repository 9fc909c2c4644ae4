import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  anthropicPromptSeen,
  type FakeModelServer,
  type FakeReply,
  type RecordedRequest,
  startFakeAnthropic,
  startFakeOpenAI,
  withoutPromptCache,
} from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/**
 * Prompt caching changes nothing the model sees but the cache markers (issue 35): the same pipeline is run with
 * `cache: off` and with `cache: auto` on Anthropic and on OpenAI, through the real SDKs against the fakes, and the
 * request bodies of the two runs are compared call by call once the markers are taken out.
 */

// biome-ignore lint/suspicious/noExplicitAny: request bodies are whatever JSON the SDKs sent.
type Json = any;

const CACHE_MARKERS = ['cache_control', 'prompt_cache_key', 'prompt_cache_retention'];

/** Instructions long enough to be cached (over 1,024 tokens at the fakes' 4 characters a token), as a real agent's are. */
const RULES = Array.from(
  { length: 80 },
  (_, i) => `Rule ${i + 1}: keep notes short, name files exactly, and say what you changed.`,
).join(' ');

/** Plan, then write and read a file with tools, then review: every kind of turn a conversation holds. */
function pipeline(name: string, model: string): string {
  return `version: 1
name: ${name}
models:
${model}
defaults: { model: m }
agents:
  planner: { instructions: "Plan the work. ${RULES}" }
  executor:
    instructions: "Do the work with the tools. ${RULES}"
    tools: [write_file, read_file, list_files]
  reviewer: { instructions: "Review the work. ${RULES}", tools: [read_file] }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: execute, kind: agent, agent: executor }
  - { id: review, kind: review, agent: reviewer, onReject: execute, maxRounds: 2 }
`;
}

/** The replies one run of the pipeline consumes, in order. */
const replies = (): FakeReply[] => [
  { kind: 'message', content: '1. Write notes.md. 2. Read it back.' },
  {
    kind: 'message',
    content: 'Writing the notes.',
    toolCalls: [{ id: 'toolu_w', name: 'write_file', arguments: '{"path":"notes.md","content":"# Notes"}' }],
  },
  {
    kind: 'message',
    toolCalls: [
      { id: 'toolu_r', name: 'read_file', arguments: '{"path":"notes.md"}' },
      { id: 'toolu_l', name: 'list_files', arguments: '{}' },
    ],
  },
  { kind: 'message', content: 'Wrote notes.md and read it back.' },
  { kind: 'message', content: '{"decision": "approve", "feedback": "fine"}' },
];

/** Each model call's usage in task `id`, in order, with the agent that made it. */
const usageOf = (h: Harness, id: string) =>
  ofKind(h.eventsOf(id), 'llm.response').map((e) => ({ agent: e.data.agent, ...e.data.usage }));

/** The share of a call's input read from the cache. */
const readShare = (usage: { inputTokens: number; cachedTokens: number }) =>
  usage.cachedTokens / usage.inputTokens;

const markersIn = (body: Json): string[] =>
  CACHE_MARKERS.filter((marker) => JSON.stringify(body).includes(`"${marker}"`));

describe('prompt caching: the model sees the same prompt with cache off and on', () => {
  let anthropic: FakeModelServer;
  let openai: FakeModelServer;
  let dir: string;
  let h: Harness;

  beforeAll(async () => {
    [anthropic, openai] = await Promise.all([startFakeAnthropic(), startFakeOpenAI()]);
    dir = await mkdtemp(join(tmpdir(), 'troupe-prompt-cache-'));
    const claude = (cache: string) =>
      `  m: { provider: anthropic, model: claude-sonnet-4-6, baseURL: "${anthropic.baseURL}", cache: ${cache} }`;
    const gpt = (cache: string) =>
      `  m: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}", cache: ${cache} }`;
    const files: Record<string, string> = {
      'an-off.yaml': pipeline('an-off', claude('off')),
      'an-auto.yaml': pipeline('an-auto', claude('auto')),
      'oa-off.yaml': pipeline('oa-off', gpt('off')),
      'oa-auto.yaml': pipeline('oa-auto', gpt('auto')),
    };
    for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), text);
    h = await startHarness(
      Object.keys(files).map((file) => join(dir, file)),
      { env: { OPENAI_API_KEY: 'sk-test-openai', ANTHROPIC_API_KEY: 'sk-ant-test' } },
    );
  });
  afterAll(async () => {
    await h?.stop();
    await Promise.all([anthropic?.stop(), openai?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Runs task `id` of `name` with the same replies each time; the requests its model calls sent. */
  async function run(
    fake: FakeModelServer,
    name: string,
    id = `${name}-1`,
    goal = 'Write notes.md with a title, then check it.',
  ): Promise<RecordedRequest[]> {
    const before = fake.requests.length;
    fake.enqueue(...replies());
    publishTask(h, name, { id, goal });
    const final = await h.finalOf(id);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    return fake.requests.slice(before);
  }

  it('on Anthropic: the same tools, system text and messages, with breakpoints only under auto', async () => {
    const off = await run(anthropic, 'an-off');
    const auto = await run(anthropic, 'an-auto');

    expect(off).toHaveLength(5);
    expect(auto.map((r) => anthropicPromptSeen(r.body))).toEqual(off.map((r) => anthropicPromptSeen(r.body)));
    // Off is today's body: no marker anywhere, the system prompt a plain string.
    for (const { body } of off) {
      expect(markersIn(body)).toEqual([]);
      expect(typeof body.system).toBe('string');
    }
    // Auto marks the system prompt of every call; with tools, the last tool and the conversation's last block too.
    // The planner has no tools, so makes one call a step that no later call reads: its system prompt alone is marked.
    for (const { body } of auto) {
      expect(body.system.at(-1).cache_control).toEqual({ type: 'ephemeral' });
      const end = body.messages.at(-1).content.at(-1).cache_control;
      if (body.tools) {
        expect(end).toEqual({ type: 'ephemeral' });
        expect(body.tools.at(-1).cache_control).toEqual({ type: 'ephemeral' });
      } else expect(end).toBeUndefined();
    }
    // The executor's three calls and the reviewer's carry tools; the planner has none.
    expect(auto.map((r) => r.body.tools !== undefined)).toEqual([false, true, true, true, true]);

    // Another task of the same agents: its calls start with the same tools and system prompt, markers included,
    // so they read what the first task's calls wrote.
    const next = await run(anthropic, 'an-auto', 'an-auto-2', 'Write todo.md with a title, then check it.');
    expect(next.map((r) => [r.body.tools, r.body.system])).toEqual(
      auto.map((r) => [r.body.tools, r.body.system]),
    );
    expect(next[0]?.body.messages).not.toEqual(auto[0]?.body.messages);

    // The fake caches as Anthropic does: nothing without breakpoints; with them, the executor's later calls read
    // the earlier ones' prefix, and the next task reads the tools and instructions the first one wrote.
    for (const usage of usageOf(h, 'an-off-1')) {
      expect(usage.cachedTokens).toBe(0);
      expect(usage.cacheWriteTokens ?? 0).toBe(0);
    }
    const executor = usageOf(h, 'an-auto-1').filter((u) => u.agent === 'executor');
    expect(executor[0]?.cacheWriteTokens).toBeGreaterThan(0);
    for (const later of executor.slice(1)) expect(readShare(later)).toBeGreaterThanOrEqual(0.8);
    for (const usage of usageOf(h, 'an-auto-2')) expect(usage.cachedTokens).toBeGreaterThan(0);
  });

  it('on OpenAI: the same messages and tools, with a prompt_cache_key per agent only under auto', async () => {
    const off = await run(openai, 'oa-off');
    const auto = await run(openai, 'oa-auto');

    expect(off).toHaveLength(5);
    expect(auto.map((r) => withoutPromptCache(r.body))).toEqual(off.map((r) => withoutPromptCache(r.body)));
    for (const { body } of off) expect(markersIn(body)).toEqual([]);
    expect(auto.map((r) => r.body.prompt_cache_key)).toEqual([
      'troupe:oa-auto:planner',
      'troupe:oa-auto:executor',
      'troupe:oa-auto:executor',
      'troupe:oa-auto:executor',
      'troupe:oa-auto:reviewer',
    ]);
    // No lifetime asked of the entry, and no step waits on a person: no 24-hour retention.
    for (const { body } of auto) expect(body).not.toHaveProperty('prompt_cache_retention');

    // Another task of the same agents: the same key, tools and system message at the front.
    const next = await run(openai, 'oa-auto', 'oa-auto-2', 'Write todo.md with a title, then check it.');
    const front = (r: RecordedRequest) => [r.body.prompt_cache_key, r.body.tools, r.body.messages[0]];
    expect(next.map(front)).toEqual(auto.map(front));
    expect(next[0]?.body.messages[1]).not.toEqual(auto[0]?.body.messages[1]);

    // OpenAI caches on its own; the key keeps an agent's calls together, so its later calls and the next task's
    // read what came before.
    const executor = usageOf(h, 'oa-auto-1').filter((u) => u.agent === 'executor');
    for (const later of executor.slice(1)) expect(readShare(later)).toBeGreaterThanOrEqual(0.8);
    for (const usage of usageOf(h, 'oa-auto-2')) expect(usage.cachedTokens).toBeGreaterThan(0);
  });
});
