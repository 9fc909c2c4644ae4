import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createStepRunner } from '@troupe/coordinator';
import { type ModelProvider, type ModelRequest, Script, ScriptedProvider } from '@troupe/llm';
import {
  AgentStepReply,
  type AgentStepRequest,
  StepHeartbeat,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import {
  type AgentDefinition,
  createLogger,
  defineTool,
  EventFactory,
  ensureTroupeStreams,
  NatsBus,
  requestWithHeartbeats,
  runAgentStep,
  type StepDeps,
  StepJournal,
  startAgentHost,
  systemClock,
  ToolRegistry,
  TransportError,
} from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ofKind } from './support/harness.ts';

/** A step's journal on a real nats-server, driven directly: the agent's checkpoint and its side effects once. */
describe('the step journal', () => {
  let nats: TestNats;
  let bus: NatsBus;
  let journal: StepJournal;
  let root: string;

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await NatsBus.connect({
      servers: nats.url,
      name: 'journal-test',
      logger: createLogger({ level: 'silent' }),
    });
    await ensureTroupeStreams(bus);
    journal = await StepJournal.open(bus);
    root = await mkdtemp(join(tmpdir(), 'troupe-journal-'));
  });
  afterAll(async () => {
    await bus?.close();
    await nats?.stop();
    await rm(root, { recursive: true, force: true });
  });

  /** Counts the times each tool really ran. */
  const runs = { append: 0, lookup: 0 };
  const append = defineTool({
    name: 'append',
    description: 'Append a line somewhere outside',
    input: z.object({ line: z.string() }),
    async run({ line }) {
      runs.append++;
      return `appended ${line}`;
    },
  });
  const lookup = defineTool({
    name: 'lookup',
    description: 'Read something',
    input: z.object({ key: z.string() }),
    rerunnable: true,
    async run({ key }) {
      runs.lookup++;
      return `value of ${key}`;
    },
  });

  const script = {
    agents: {
      clerk: [
        { toolCalls: [{ id: 'c1', name: 'append', arguments: { line: 'one' } }] },
        { toolCalls: [{ id: 'c2', name: 'lookup', arguments: { key: 'k' } }] },
        { content: 'all recorded' },
      ],
    },
  };

  /** A fresh scripted model, as a new process would have, that keeps the requests it was sent. */
  function model(): { model: ModelProvider; requests: ModelRequest[] } {
    const inner = new ScriptedProvider(Script.parse(script));
    const requests: ModelRequest[] = [];
    return {
      requests,
      model: {
        provider: inner.provider,
        model: inner.model,
        complete: (req) => {
          requests.push(req);
          return inner.complete(req);
        },
      },
    };
  }

  const agent = (m: ModelProvider): AgentDefinition => ({
    name: 'clerk',
    instructions: 'Record things.',
    model: m,
    tools: ['append', 'lookup'],
    rules: [
      { tool: 'append', decision: 'allow' },
      { tool: 'lookup', decision: 'allow' },
    ],
    maxTurns: 5,
  });

  const stepRequest = (taskId: string): AgentStepRequest => ({
    stepId: `${taskId}.record.1`,
    taskId,
    pipeline: 'journaled',
    agent: 'clerk',
    step: 'record',
    round: 1,
    goal: 'record one line',
    context: [],
    expect: 'text',
    priorModelCalls: 0,
  });

  function deps(events: TroupeEvent[]): StepDeps {
    const registry = new ToolRegistry();
    registry.register(append);
    registry.register(lookup);
    return {
      registry,
      workspaceRoot: root,
      clock: systemClock,
      events: new EventFactory({ now: () => Date.now() }),
      publish: (event) => events.push(event),
      journal,
    };
  }

  it('resumes a step from its records: no recorded turn is asked again, no recorded call runs again', async () => {
    runs.append = 0;
    const first = model();
    const firstEvents: TroupeEvent[] = [];
    // The first run dies after its first turn's call ran and was recorded (as a process would).
    const slow = {
      ...first.model,
      complete: async (req: ModelRequest) => {
        if (first.requests.length >= 1) {
          throw new Error('the process died');
        }
        return first.model.complete(req);
      },
    };
    await runAgentStep(agent(slow), stepRequest('resume-1'), deps(firstEvents));
    expect(runs.append).toBe(1);

    const second = model();
    const events: TroupeEvent[] = [];
    const reply = await runAgentStep(agent(second.model), stepRequest('resume-1'), deps(events));

    expect(reply).toMatchObject({ ok: true, output: 'all recorded', turns: 3 });
    expect(runs.append).toBe(1);
    // Only the turns after the recorded one were asked, numbered as the task's second and third calls.
    expect(second.requests.map((r) => r.context.call)).toEqual([1, 2]);
    expect(ofKind(events, 'llm.response').map((e) => e.data.journaled ?? false)).toEqual([
      true,
      false,
      false,
    ]);
    expect(ofKind(events, 'tool.result').map((e) => [e.data.tool, e.data.journaled ?? false])).toEqual([
      ['append', true],
      ['lookup', false],
    ]);
    // Usage counts every turn once, the replayed one included.
    expect(reply.usage.modelCalls).toBe(3);
  });

  it('does not run again a call cut short before its result was recorded, unless its tool is rerunnable', async () => {
    runs.append = 0;
    runs.lookup = 0;
    const stepId = stepRequest('doubt-1').stepId;
    // A process claimed both calls and died before recording their results.
    const now = new Date();
    expect(
      await journal.claimToolCall(
        StepJournal.toolKey(stepId, 1, 0),
        'append',
        '{"line":"one"}',
        'dead-run',
        now,
      ),
    ).toEqual({
      state: 'new',
    });
    expect(
      await journal.claimToolCall(
        StepJournal.toolKey(stepId, 2, 0),
        'lookup',
        '{"key":"k"}',
        'dead-run',
        now,
      ),
    ).toEqual({
      state: 'new',
    });

    const events: TroupeEvent[] = [];
    const resumed = model();
    const reply = await runAgentStep(agent(resumed.model), stepRequest('doubt-1'), deps(events));

    expect(reply.ok).toBe(true);
    // The model is told, in the tool result it reads, what is known: another run claimed the call, and whether it
    // finished is unknown. Nothing is said of a crash, which nobody saw.
    const told = resumed.requests[1]?.messages.at(-1);
    expect(told).toMatchObject({
      role: 'tool',
      name: 'append',
      isError: true,
      content: expect.stringMatching(
        /another run of this step claimed this append call .*has not recorded its result; whether it finished is unknown/,
      ),
    });
    expect(told?.content).not.toMatch(/crash/);
    const results = ofKind(events, 'tool.result');
    expect(results[0]?.data).toMatchObject({ tool: 'append', ok: false, error: { code: 'in_doubt' } });
    expect(results[0]?.data.error?.message).toMatch(/whether it finished is unknown/);
    expect(runs.append).toBe(0);
    expect(results[1]?.data).toMatchObject({ tool: 'lookup', ok: true, output: 'value of k' });
    expect(runs.lookup).toBe(1);
    // The in-doubt outcome is recorded: a third run replays it rather than deciding again.
    expect(
      await journal.claimToolCall(
        StepJournal.toolKey(stepId, 1, 0),
        'append',
        '{"line":"one"}',
        'dead-run',
        now,
      ),
    ).toMatchObject({
      state: 'done',
      result: { ok: false, error: { code: 'in_doubt' } },
    });
  });

  it('runs a recorded position again when the call there is a different one', async () => {
    const key = StepJournal.toolKey('changed-1.record.1', 1, 0);
    const now = new Date();
    await journal.claimToolCall(key, 'append', '{"line":"one"}', 'dead-run', now);
    expect(await journal.claimToolCall(key, 'append', '{"line":"two"}', 'new-run', now)).toEqual({
      state: 'new',
    });
    expect(await journal.claimToolCall(key, 'append', '{"line":"two"}', 'third-run', now)).toEqual({
      state: 'in_doubt',
      startedAt: now.toISOString(),
    });
  });

  it('lets the first reply recorded for a turn stand, so two runs of a step go on alike', async () => {
    const key = StepJournal.modelKey('twice-1.record.1', 1);
    const conversation = [{ role: 'user' as const, content: 'record one line' }];
    const reply = (content: string) => ({
      content,
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: 'stop',
      provider: 'scripted',
      model: 'scripted',
      durationMs: 1,
    });
    const now = new Date();
    expect(await journal.recordModelReply(key, conversation, reply('first'), now)).toMatchObject({
      content: 'first',
    });
    // A second run asked the same turn meanwhile and got another answer: it takes the recorded one.
    expect(await journal.recordModelReply(key, conversation, reply('second'), now)).toMatchObject({
      content: 'first',
      journaled: true,
    });
    // A different conversation at that turn (the step changed) replaces it.
    const changed = [{ role: 'user' as const, content: 'record two lines' }];
    expect(await journal.recordModelReply(key, changed, reply('third'), now)).toMatchObject({
      content: 'third',
    });
    expect(await journal.modelReply(key, changed)).toMatchObject({ content: 'third' });
    expect(await journal.modelReply(key, conversation)).toBeUndefined();
  });

  it('keeps what was told before a turn under its model key: the first record stands, and the reply keeps it', async () => {
    const key = StepJournal.modelKey('told-1.record.1', 2);
    const conversation = [{ role: 'user' as const, content: 'record one line' }];
    const at = '2026-12-06T00:00:00.000Z';
    const m1 = { id: 'm-1', text: 'use the v2 API', by: 'ann', at };
    const m2 = { id: 'm-2', text: 'and cite it', at };
    const now = new Date();
    expect(await journal.recordTold(key, [m1], conversation, now)).toEqual([m1]);
    // Another run of the step, told more meanwhile, puts the same message at this turn.
    expect(await journal.recordTold(key, [m1, m2], conversation, now)).toEqual([m1]);
    expect((await journal.recordedTurn(key)).told).toEqual([m1]);

    const told = [...conversation, { role: 'user' as const, content: 'Message from ann: use the v2 API' }];
    const reply = {
      content: 'done',
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: 'stop',
      provider: 'scripted',
      model: 'scripted',
      durationMs: 1,
    };
    expect(await journal.recordModelReply(key, told, reply, now, [m1])).toMatchObject({ content: 'done' });
    const turn = await journal.recordedTurn(key);
    expect(turn.told).toEqual([m1]);
    expect(turn.reply(told)).toMatchObject({ content: 'done' });
    expect(turn.reply(conversation)).toBeUndefined();
    // A run whose turn was answered with nothing told reads nothing there.
    const plain = StepJournal.modelKey('told-1.record.1', 3);
    await journal.recordModelReply(plain, conversation, reply, now);
    expect(await journal.recordTold(plain, [m2], conversation, now)).toEqual([]);
  });

  it('runs a step again on the same host after its journal was out of reach, instead of replaying the failure', async () => {
    runs.append = 0;
    // The journal fails one claim, as during a long outage; every other operation goes through.
    let failures = 1;
    const flaky = new Proxy(journal, {
      get(target, property) {
        const value = Reflect.get(target, property, target);
        if (property === 'claimToolCall' && failures > 0) {
          return async () => {
            failures--;
            throw new Error('TIMEOUT');
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const registry = new ToolRegistry();
    registry.register(append);
    registry.register(lookup);
    const host = startAgentHost({
      bus,
      pipeline: 'journaled',
      agents: [agent(model().model)],
      registry,
      workspaceRoot: root,
      logger: createLogger({ level: 'silent' }),
      journal: flaky,
    });
    try {
      const runStep = createStepRunner({ bus, clock: systemClock, heartbeatMs: 1_000 });
      const output = await runStep(
        { request: stepRequest('flaky-1'), timeoutMs: 20_000 },
        new AbortController().signal,
      );
      expect(output).toMatchObject({ ok: true, output: 'all recorded' });
      expect(runs.append).toBe(1);
      expect(failures).toBe(0);
    } finally {
      await host.stop();
    }
  });

  it("lists every request to a person a task's steps made, also when they are recorded at once", async () => {
    const now = new Date();
    const keys = [0, 1, 2, 3, 4].map((i) =>
      StepJournal.humanKey(
        StepJournal.toolKey(`asking-1.review.${i}`, 1, 0),
        i % 2 ? 'question' : 'approval',
      ),
    );
    await Promise.all(keys.map((key, i) => journal.recordHumanRequest(key, `req-${i}`, now)));
    // Recorded again (a step run again finds its request), it is listed once.
    await journal.recordHumanRequest(keys[0] ?? '', 'req-0', now);
    expect((await journal.humanRequestsOf('asking-1')).sort()).toEqual([
      'req-0',
      'req-1',
      'req-2',
      'req-3',
      'req-4',
    ]);
    expect(await journal.humanRequestsOf('asking-2')).toEqual([]);
    expect(await journal.humanRequest(keys[3] ?? '')).toBe('req-3');
  });

  it('takes a claim it finds from its own run as its own (a write retried after its reply was lost)', async () => {
    const key = StepJournal.toolKey('own-1.record.1', 1, 0);
    const now = new Date();
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'this-run', now)).toEqual({
      state: 'new',
    });
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'this-run', now)).toEqual({
      state: 'new',
    });
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'other-run', now)).toMatchObject({
      state: 'in_doubt',
    });
  });
});

describe('steps with heartbeats', () => {
  let nats: TestNats;
  let bus: NatsBus;

  beforeAll(async () => {
    nats = await startTestNats({ jetstream: false });
    bus = await NatsBus.connect({
      servers: nats.url,
      name: 'heartbeat-test',
      logger: createLogger({ level: 'silent' }),
    });
  });
  afterAll(async () => {
    await bus?.close();
    await nats?.stop();
  });

  const reply = (stepId: string): AgentStepReply => ({
    ok: true,
    stepId,
    output: 'done',
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    turns: 0,
  });
  const send = (subject: string, idleMs: number, timeoutMs = 5_000) =>
    requestWithHeartbeats(bus, subject, { stepId: 's' }, AgentStepReply, StepHeartbeat, {
      timeoutMs,
      idleMs,
    });

  it('waits past the idle limit while heartbeats come, and returns the reply', async () => {
    const sub = bus.connection.subscribe('hb.alive', {
      callback: (_e, msg) => {
        const beat = setInterval(() => msg.respond(JSON.stringify({ stepId: 's', heartbeat: true })), 50);
        setTimeout(() => {
          clearInterval(beat);
          msg.respond(JSON.stringify(reply('s')));
        }, 600);
      },
    });
    await bus.flush();
    await expect(send('hb.alive', 200)).resolves.toMatchObject({ ok: true, output: 'done' });
    sub.unsubscribe();
  });

  it('fails with stalled when the responder goes silent', async () => {
    const sub = bus.connection.subscribe('hb.dead', {
      callback: (_e, msg) => {
        msg.respond(JSON.stringify({ stepId: 's', heartbeat: true }));
      },
    });
    await bus.flush();
    const error = await send('hb.dead', 200).catch((e: unknown) => e);
    expect(TransportError.is(error, 'stalled')).toBe(true);
    sub.unsubscribe();
  });

  it('fails with no_responders when nobody serves the subject', async () => {
    const error = await send('hb.nobody', 1_000).catch((e: unknown) => e);
    expect(TransportError.is(error, 'no_responders')).toBe(true);
  });

  it("fails with the responder's own error code", async () => {
    const sub = bus.connection.subscribe('hb.refuses', {
      callback: (_e, msg) => {
        msg.respond(JSON.stringify({ ok: false, error: { code: 'misrouted', message: 'wrong agent' } }));
      },
    });
    await bus.flush();
    const error = await send('hb.refuses', 1_000).catch((e: unknown) => e);
    expect(TransportError.is(error, 'misrouted')).toBe(true);
    sub.unsubscribe();
  });

  it('sends a step again when its host could not reach the journal', async () => {
    const subject = subjects.agent('p', 'a');
    let calls = 0;
    const sub = bus.connection.subscribe(subject, {
      callback: (_e, msg) => {
        calls++;
        const request = JSON.parse(new TextDecoder().decode(msg.data)) as { stepId: string };
        msg.respond(
          JSON.stringify(
            calls === 1
              ? {
                  ...reply(request.stepId),
                  ok: false,
                  error: { code: 'journal_unavailable', message: 'NATS away' },
                }
              : reply(request.stepId),
          ),
        );
      },
    });
    await bus.flush();
    const runStep = createStepRunner({ bus, clock: systemClock, heartbeatMs: 1_000 });
    const output = await runStep(
      {
        request: {
          stepId: 't.s.1',
          taskId: 't',
          pipeline: 'p',
          agent: 'a',
          step: 's',
          round: 1,
          goal: 'g',
          context: [],
          expect: 'text',
        },
        timeoutMs: 10_000,
      },
      new AbortController().signal,
    );
    expect(output).toMatchObject({ ok: true, output: 'done' });
    expect(calls).toBe(2);
    sub.unsubscribe();
  });
});
