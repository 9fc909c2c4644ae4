import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import {
  AgentStepReply,
  type AgentStepRequest,
  type EventData,
  type EventKind,
  subjects,
  type ToldMessage,
} from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { JournalEntry, StepJournal } from '../../src/durable/stepJournal.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

/** A model that answers only when the test says so; a call whose signal aborts fails, as a real one does. */
function heldModel() {
  const asked: ModelRequest[] = [];
  const answers: ((response: ModelResponse) => void)[] = [];
  const model: ModelProvider = {
    provider: 'held',
    model: 'held-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve, reject) => {
        asked.push(request);
        answers.push(resolve);
        request.signal?.addEventListener('abort', () => reject(request.signal?.reason), { once: true });
      }),
  };
  const answer = (content: string, toolCalls: ToolCall[] = []) =>
    answers.shift()?.({
      content,
      toolCalls,
      usage: { inputTokens: 10, outputTokens: 2, cachedTokens: 0 },
      finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
      model: 'held-1',
    });
  return { model, asked, answer };
}

/** A tool whose calls finish when the test says so; every run is counted. */
function heldTool() {
  const runs: string[] = [];
  const finishes: ((output: string) => void)[] = [];
  const tool = {
    name: 'fetch_page',
    description: 'Fetches a page.',
    input: z.object({ url: z.string() }),
    run: ({ url }: { url: string }) =>
      new Promise<string>((resolve) => {
        runs.push(url);
        finishes.push(resolve);
      }),
  };
  return { tool, runs, finish: (output: string) => finishes.shift()?.(output) };
}

const fetchCall: ToolCall = {
  id: 'call-1',
  name: 'fetch_page',
  arguments: '{"url":"https://example.com/v1"}',
};
const silent = createLogger({ level: 'silent' });
const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

/** How many messages of a model request say `text`. */
const saying = (request: ModelRequest | undefined, text: string) =>
  request?.messages.filter((m) => m.content.includes(text)).length ?? 0;

describe('an agent step paused or told while it works (in-memory bus, simulated clock, journal in memory)', () => {
  let root: string;
  let clock: SimulatedClock;
  let bus: MemoryBus;
  let kv: MemoryKv<JournalEntry>;
  let tool: ReturnType<typeof heldTool>;
  let hosts: AgentHost[];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-steer-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    kv = new MemoryKv(JournalEntry);
    tool = heldTool();
    hosts = [];
  });
  afterEach(async () => {
    await Promise.all(hosts.map((host) => host.stop()));
  });

  /** A host of agent `worker` over the one journal, as every worker of a pipeline shares it. */
  function startHost(model: ModelProvider): AgentHost {
    const registry = new ToolRegistry();
    registry.register(tool.tool);
    const host = startAgentHost({
      bus,
      pipeline: 'steer',
      agents: [
        { name: 'worker', instructions: 'Work.', model, tools: ['fetch_page'], rules: [], maxTurns: 5 },
      ],
      registry,
      workspaceRoot: root,
      logger: silent,
      clock,
      journal: new StepJournal(kv),
    });
    hosts.push(host);
    return host;
  }

  /** Sends a step to the hosts; its reply is kept once it comes. */
  function sendStep(stepId: string, extra: Partial<AgentStepRequest> = {}) {
    const received: unknown[] = [];
    const request: AgentStepRequest = {
      stepId,
      taskId: stepId.split('.')[0] ?? stepId,
      pipeline: 'steer',
      agent: 'worker',
      step: 'work',
      round: 1,
      goal: 'read the API docs',
      context: [],
      expect: 'text',
      ...extra,
    };
    bus.requestReplies(subjects.agent('steer', 'worker'), request, (message) => {
      if (message.ok) received.push(JSON.parse(new TextDecoder().decode(message.data)));
    });
    return () => received.map((m) => AgentStepReply.safeParse(m)).find((r) => r.success)?.data;
  }

  const events = new EventFactory({ now: () => Date.UTC(2026, 11, 6) });
  /** Publishes a task's event, as its coordinator does once it recorded the pause or the message. */
  async function publish<K extends EventKind>(kind: K, taskId: string, data: z.input<(typeof EventData)[K]>) {
    await bus.publishEvent(events.make(kind, { pipeline: 'steer', taskId, traceparent }, data));
    await bus.settled();
  }
  const pause = (taskId: string) => publish('task.paused', taskId, { state: 'work', round: 1, by: 'ann' });
  const tell = (taskId: string, messageId: string, text: string) =>
    publish('task.told', taskId, { messageId, text, by: 'ann' });

  const journaled = async (key: string) => (await kv.get(key))?.value;

  it('lets the model call a pause meets finish and journals it, replies paused, and goes on from its journal when sent again', async () => {
    const model = heldModel();
    startHost(model.model);
    const first = sendStep('t1.work.1');
    await expect.poll(() => model.asked.length).toBe(1);

    await pause('t1');
    // The call is not cut short.
    expect(model.asked[0]?.signal?.aborted).toBe(false);
    expect(first()).toBeUndefined();
    model.answer('', [fetchCall]);

    await expect
      .poll(() => first())
      .toMatchObject({
        ok: false,
        error: { code: 'paused', message: expect.stringContaining('paused') },
        turns: 1,
        usage: { inputTokens: 10, outputTokens: 2, modelCalls: 1 },
      });
    expect(await journaled(StepJournal.modelKey('t1.work.1', 1))).toMatchObject({ kind: 'model.reply' });
    // It stopped before the tool the model asked for, and asked the model nothing more.
    expect(tool.runs).toEqual([]);
    expect(model.asked).toHaveLength(1);

    // Resumed: the same step again. Its first turn comes from the journal; the tool runs, then the second turn.
    const again = sendStep('t1.work.1');
    await expect.poll(() => tool.runs).toEqual(['https://example.com/v1']);
    expect(model.asked).toHaveLength(1);
    tool.finish('the v1 page');
    await expect.poll(() => model.asked.length).toBe(2);
    model.answer('read it');
    await expect.poll(() => again()).toMatchObject({ ok: true, output: 'read it', turns: 2 });
    expect(model.asked).toHaveLength(2);
  });

  it('lets the tool call a pause meets finish and journals its result, then replies paused before the next model call', async () => {
    const model = heldModel();
    startHost(model.model);
    const first = sendStep('t2.work.1');
    await expect.poll(() => model.asked.length).toBe(1);
    model.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);

    await pause('t2');
    expect(first()).toBeUndefined();
    tool.finish('the v1 page');

    await expect.poll(() => first()).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 1 });
    expect(await journaled(StepJournal.toolKey('t2.work.1', 1, 0))).toMatchObject({
      kind: 'tool.result',
      result: { ok: true, output: 'the v1 page' },
    });
    expect(model.asked).toHaveLength(1);

    const again = sendStep('t2.work.1');
    await expect.poll(() => model.asked.length).toBe(2);
    // The tool's recorded result stands in: it ran once.
    expect(tool.runs).toHaveLength(1);
    expect(saying(model.asked[1], 'the v1 page')).toBe(1);
    model.answer('read it');
    await expect.poll(() => again()).toMatchObject({ ok: true, output: 'read it' });
  });

  it('reads a message told during a tool call before the next model call, once, and lists it in the reply', async () => {
    const model = heldModel();
    startHost(model.model);
    const reply = sendStep('t3.work.1');
    await expect.poll(() => model.asked.length).toBe(1);
    model.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);

    await tell('t3', 'm1', 'use the v2 API, not v1');
    // The same event heard twice (a redelivery) is the same message.
    await tell('t3', 'm1', 'use the v2 API, not v1');
    tool.finish('the v1 page');

    await expect.poll(() => model.asked.length).toBe(2);
    const asked = model.asked[1];
    expect(saying(asked, 'use the v2 API, not v1')).toBe(1);
    // After the tool's result, as a user turn that says who sent it while the agent works.
    expect(asked?.messages.slice(-2)).toMatchObject([
      { role: 'tool', content: 'the v1 page' },
      { role: 'user', content: expect.stringMatching(/^Message from ann, sent while you work/) },
    ]);
    expect(bus.eventsOf('agent.told').map((e) => [e.from, e.to])).toEqual([['human', 'worker']]);
    expect(bus.eventsOf('agent.told').map((e) => e.data)).toEqual([
      { agent: 'worker', stepId: 't3.work.1', turn: 2, messageIds: ['m1'] },
    ]);
    model.answer('read the v2 docs');
    await expect.poll(() => reply()).toMatchObject({ ok: true, toldRead: ['m1'] });
  });

  it('puts a told message at the same turn for a step sent again to another host after a crash: nothing asked twice, nothing doubled', async () => {
    const before = heldModel();
    const first = startHost(before.model);
    sendStep('t4.work.1');
    await expect.poll(() => before.asked.length).toBe(1);
    before.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);
    await tell('t4', 'm1', 'use the v2 API, not v1');
    tool.finish('the v1 page');
    await expect.poll(() => before.asked.length).toBe(2);
    // Journaled before the model was asked.
    expect(await journaled(StepJournal.modelKey('t4.work.1', 2))).toMatchObject({
      kind: 'told',
      messages: [{ id: 'm1', text: 'use the v2 API, not v1', by: 'ann' }],
    });

    // The host goes down mid-call; the workflow sends the step again, with what it holds unread: that message and
    // one told since.
    await first.stop();
    const after = heldModel();
    startHost(after.model);
    const at = '2026-12-06T00:00:00.000Z';
    const reply = sendStep('t4.work.1', {
      told: [
        { id: 'm1', text: 'use the v2 API, not v1', by: 'ann', at },
        { id: 'm2', text: 'and cite it', at },
      ],
    });

    await expect.poll(() => after.asked.length).toBe(1);
    // Only the turn the first host never got an answer to, with the same conversation: the message in the same place,
    // and the later one not slipped in beside it.
    expect(after.asked[0]?.messages).toEqual(before.asked[1]?.messages);
    expect(saying(after.asked[0], 'use the v2 API, not v1')).toBe(1);
    expect(saying(after.asked[0], 'and cite it')).toBe(0);
    expect(tool.runs).toHaveLength(1);
    after.answer('', [{ ...fetchCall, id: 'call-2', arguments: '{"url":"https://example.com/v2"}' }]);
    await expect.poll(() => tool.runs.length).toBe(2);
    tool.finish('the v2 page');

    // The later message comes before the next call; the first is not read again.
    await expect.poll(() => after.asked.length).toBe(2);
    expect(saying(after.asked[1], 'use the v2 API, not v1')).toBe(1);
    expect(saying(after.asked[1], 'and cite it')).toBe(1);
    after.answer('read the v2 docs');
    await expect
      .poll(() => reply())
      .toMatchObject({ ok: true, output: 'read the v2 docs', toldRead: ['m1', 'm2'] });
    // The turn's record keeps what was read before it, beside its reply, for any later run.
    expect(await journaled(StepJournal.modelKey('t4.work.1', 2))).toMatchObject({
      kind: 'model.reply',
      told: [{ id: 'm1' }],
    });
  });

  it('replays a finished turn with its told message, asking the model nothing, when the step runs again', async () => {
    const before = heldModel();
    startHost(before.model);
    const told: ToldMessage = { id: 'm1', text: 'keep it short', at: '2026-12-06T00:00:00.000Z' };
    const first = sendStep('t5.work.1', { told: [told] });
    await expect.poll(() => before.asked.length).toBe(1);
    expect(saying(before.asked[0], 'Message from a person')).toBe(1);
    before.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);
    await pause('t5');
    tool.finish('the v1 page');
    await expect
      .poll(() => first())
      .toMatchObject({ ok: false, error: { code: 'paused' }, toldRead: ['m1'] });

    // Resumed on a new host without the message (the workflow dropped what the paused run read): the journal has it.
    const after = heldModel();
    startHost(after.model);
    const again = sendStep('t5.work.1');
    await expect.poll(() => after.asked.length).toBe(1);
    expect(saying(after.asked[0], 'keep it short')).toBe(1);
    expect(after.asked[0]?.messages).toEqual([
      ...(before.asked[0]?.messages ?? []),
      expect.objectContaining({ role: 'assistant' }),
      expect.objectContaining({ role: 'tool' }),
    ]);
    after.answer('short');
    await expect.poll(() => again()).toMatchObject({ ok: true, toldRead: ['m1'] });
    expect(tool.runs).toHaveLength(1);
  });

  it('reads a message that the request carries and a task.told event repeats once', async () => {
    const model = heldModel();
    startHost(model.model);
    const told: ToldMessage = {
      id: 'm1',
      text: 'use the v2 API, not v1',
      by: 'ann',
      at: '2026-12-06T00:00:00.000Z',
    };
    const reply = sendStep('t6.work.1', { told: [told] });
    await expect.poll(() => model.asked.length).toBe(1);
    expect(saying(model.asked[0], 'use the v2 API, not v1')).toBe(1);

    // Heard while the first call runs, and again after it.
    await tell('t6', 'm1', 'use the v2 API, not v1');
    model.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);
    await tell('t6', 'm1', 'use the v2 API, not v1');
    tool.finish('the v2 page');

    await expect.poll(() => model.asked.length).toBe(2);
    expect(saying(model.asked[1], 'use the v2 API, not v1')).toBe(1);
    expect(bus.eventsOf('agent.told').map((e) => e.data.turn)).toEqual([1]);
    model.answer('done');
    await expect.poll(() => reply()).toMatchObject({ ok: true, toldRead: ['m1'] });
  });

  it.each([
    ['its timeout', (): Partial<AgentStepRequest> => ({ timeoutMs: 10_000 })],
    [
      'the task deadline',
      (): Partial<AgentStepRequest> => ({ budget: { deadline: clock.now() + 10_000, sources: {} } }),
    ],
  ])(
    'replies paused, not out of time, when %s passes while a paused step finishes its tool call',
    async (_, limit) => {
      const model = heldModel();
      startHost(model.model);
      const reply = sendStep('t9.work.1', limit());
      await expect.poll(() => model.asked.length).toBe(1);
      model.answer('', [fetchCall]);
      await expect.poll(() => tool.runs.length).toBe(1);

      await pause('t9');
      // The tool call (a person's answer, say) takes twice the step's time.
      clock.advance(20_000);
      await bus.settled();
      expect(reply()).toBeUndefined();
      tool.finish('the v1 page');

      await expect.poll(() => reply()).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 1 });
      expect(model.asked).toHaveLength(1);
    },
  );

  it('still stops a step that is not paused when its timeout passes during a tool call', async () => {
    const model = heldModel();
    startHost(model.model);
    const reply = sendStep('t10.work.1', { timeoutMs: 10_000 });
    await expect.poll(() => model.asked.length).toBe(1);
    model.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);
    clock.advance(10_000);
    await expect.poll(() => reply()).toMatchObject({ ok: false, error: { code: 'step_timeout' } });
  });

  describe('steering that reaches the host before the step it concerns', () => {
    const iso = (ms: number) => new Date(ms).toISOString();
    const pausedAt = (taskId: string, since: number) =>
      publish('task.paused', taskId, { state: 'work', round: 1, by: 'ann', since: iso(since) });
    const resumedAt = (taskId: string, since: number) =>
      publish('task.resumed', taskId, {
        state: 'work',
        round: 1,
        deliveries: 1,
        after: 'pause',
        pausedMs: 1_000,
        since: iso(since),
      });

    it('stops a step sent before its task was paused at its first call boundary, and runs it sent again after the resume', async () => {
      const model = heldModel();
      startHost(model.model);
      const sentAt = clock.now();
      // The pause is published while the request is on its way: the host hears it first.
      await pausedAt('t11', sentAt + 5);
      const first = sendStep('t11.work.1', { sentAt });
      await expect
        .poll(() => first())
        .toMatchObject({ ok: false, error: { code: 'paused' }, turns: 0, usage: { modelCalls: 0 } });
      expect(model.asked).toHaveLength(0);

      await resumedAt('t11', sentAt + 5);
      const again = sendStep('t11.work.1', { sentAt: sentAt + 1_000 });
      await expect.poll(() => model.asked.length).toBe(1);
      model.answer('done');
      await expect.poll(() => again()).toMatchObject({ ok: true, output: 'done' });
    });

    it('replies paused, not out of time, for a step paused on its way whose task deadline has passed', async () => {
      const model = heldModel();
      startHost(model.model);
      const sentAt = clock.now();
      await pausedAt('t12', sentAt);
      const reply = sendStep('t12.work.1', { sentAt, budget: { deadline: sentAt - 1, sources: {} } });
      await expect.poll(() => reply()).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 0 });
      expect(model.asked).toHaveLength(0);
    });

    it('runs a step whose task was paused and resumed while its request was on its way, and one sent after a pause', async () => {
      const model = heldModel();
      startHost(model.model);
      const sentAt = clock.now();
      await pausedAt('t13', sentAt + 5);
      await resumedAt('t13', sentAt + 5);
      await pausedAt('t14', sentAt - 5);
      const first = sendStep('t13.work.1', { sentAt });
      const second = sendStep('t14.work.1', { sentAt });
      await expect.poll(() => model.asked.length).toBe(2);
      model.answer('one');
      model.answer('two');
      await expect.poll(() => [first()?.ok, second()?.ok]).toEqual([true, true]);
    });

    it('reads a message told while the request was on its way before the first model call, and not one it was sent without', async () => {
      const model = heldModel();
      startHost(model.model);
      // Told the day before the send and left out of it (another step read it), then told after the send.
      const before = new EventFactory({ now: () => Date.UTC(2026, 11, 5) });
      await bus.publishEvent(
        before.make(
          'task.told',
          { pipeline: 'steer', taskId: 't15', traceparent },
          { messageId: 'm-1', text: 'old news' },
        ),
      );
      await tell('t15', 'm-2', 'use the v2 API, not v1');
      await tell('t15', 'm-3', 'and cite it');
      const carried: ToldMessage = {
        id: 'm-3',
        text: 'and cite it',
        by: 'ann',
        at: iso(Date.UTC(2026, 11, 6)),
      };
      const reply = sendStep('t15.work.1', { sentAt: Date.UTC(2026, 11, 6), told: [carried] });

      await expect.poll(() => model.asked.length).toBe(1);
      expect(saying(model.asked[0], 'use the v2 API, not v1')).toBe(1);
      expect(saying(model.asked[0], 'and cite it')).toBe(1);
      expect(saying(model.asked[0], 'old news')).toBe(0);
      model.answer('read the v2 docs');
      await expect.poll(() => reply()).toMatchObject({ ok: true, toldRead: ['m-3', 'm-2'] });
    });
  });

  it('leaves a step alone when another task is paused or told something', async () => {
    const model = heldModel();
    startHost(model.model);
    const reply = sendStep('t7.work.1');
    await expect.poll(() => model.asked.length).toBe(1);
    await pause('t8');
    await tell('t8', 'm1', 'not for you');
    model.answer('', [fetchCall]);
    await expect.poll(() => tool.runs.length).toBe(1);
    tool.finish('page');
    await expect.poll(() => model.asked.length).toBe(2);
    expect(saying(model.asked[1], 'not for you')).toBe(0);
    model.answer('done');
    await expect.poll(() => reply()).toMatchObject({ ok: true });
    expect(reply()).not.toHaveProperty('toldRead');
  });
});
