import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventOf, TroupeEvent } from '@troupe/protocol';
import { EventFactory, systemClock } from '@troupe/runtime';
import { afterAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { loadPipeline } from '../../src/config/loadPipeline.ts';
import { runCase } from '../../src/evals/runCase.ts';
import { evalPipeline, noEffects, recordedCase, removePipelines, type Turn } from './runSupport.ts';

afterAll(removePipelines);

const results = (events: readonly TroupeEvent[]) =>
  events.filter((e): e is EventOf<'tool.result'> => e.kind === 'tool.result');
const toolsOf = (events: readonly TroupeEvent[]) =>
  events.flatMap((e) => (e.kind === 'tool.call' ? [e.data.tool] : []));

/** The recorded run: stamp "a", then say so. */
const stampA: Turn[] = [
  { toolCalls: [{ name: 'stamp', arguments: { label: 'a' } }] },
  { content: 'stamped a, done' },
];

describe('runCase: replay', () => {
  it('replays a recorded run to the same output and trajectory, calling no model and running no tool', async () => {
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects);
    const evalCase = await recordedCase(pipeline, 'c1', 'stamp a');
    expect(effects.stamps).toEqual(['a']);
    // The scripted model now has no replies left to give: a replay that called it would fail.
    const run = await runCase(evalCase, { mode: 'replay', pipeline });
    expect(run).toMatchObject({ status: 'completed', output: 'stamped a, done' });
    expect(run.taskId).toBe(evalCase.recording?.taskId);
    expect(toolsOf(run.events)).toEqual(['stamp']);
    expect(results(run.events)[0]?.data).toMatchObject({ ok: true, output: 'stamped a' });
    expect(effects.stamps).toEqual(['a']);
  });

  it('replays the demo pipeline (plan, write, a review sent back once) to its recorded output', async () => {
    const demo = join(import.meta.dirname, '..', '..', '..', '..', 'examples', 'demo.yaml');
    const pipeline = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const evalCase = await recordedCase(pipeline, 'demo', 'Write a hello note');
    const recorded = evalCase.recording?.events.at(-1);
    if (recorded?.kind !== 'task.completed') throw new Error('the demo did not complete');
    const run = await runCase(evalCase, { mode: 'replay', pipeline });
    expect(run).toMatchObject({ status: 'completed', output: recorded.data.output });
    expect(run.usage).toEqual(recorded.data.usage);
    const steps = (events: readonly TroupeEvent[]) =>
      events.flatMap((e) =>
        e.kind === 'step.completed' ? [`${e.data.step}:${e.data.verdict?.decision ?? 'ok'}`] : [],
      );
    expect(steps(run.events)).toEqual(steps(evalCase.recording?.events ?? []));
    expect(steps(run.events)).toEqual([
      'plan:ok',
      'execute:ok',
      'review:reject',
      'execute:ok',
      'review:approve',
    ]);
    expect(toolsOf(run.events)).toEqual(toolsOf(evalCase.recording?.events ?? []));
  });

  it('says how to run a case that has no recording', async () => {
    const pipeline = await evalPipeline(stampA, noEffects());
    await expect(runCase({ id: 'bare', goal: 'stamp a' }, { mode: 'replay', pipeline })).rejects.toThrow(
      'case bare has no recording; run it with --mode model or live',
    );
  });
});

describe('runCase: model', () => {
  it('calls the pipeline’s models: a changed script takes another path to another output', async () => {
    const recordedOn = await evalPipeline(stampA, noEffects());
    const evalCase = await recordedCase(recordedOn, 'c1', 'stamp a');
    const effects = noEffects();
    const changed = await evalPipeline(
      [
        { toolCalls: [{ name: 'write_file', arguments: { path: 'notes.md', content: 'hi' } }] },
        { content: 'wrote notes.md instead' },
      ],
      effects,
    );
    const run = await runCase(evalCase, { mode: 'model', pipeline: changed });
    expect(run).toMatchObject({ status: 'completed', output: 'wrote notes.md instead' });
    expect(run.taskId).not.toBe(evalCase.recording?.taskId);
    expect(toolsOf(run.events)).toEqual(['write_file']);
    // write_file is rerunnable: not in the recording, it ran for real in the run's own workspace.
    expect(results(run.events)[0]?.data).toMatchObject({ ok: true, tool: 'write_file' });
  });

  it('answers a recorded call from the recording and never runs a non-rerunnable tool for real', async () => {
    const recorder = noEffects();
    const evalCase = await recordedCase(await evalPipeline(stampA, recorder), 'c1', 'stamp a');
    expect(recorder.stamps).toEqual(['a']);
    const effects = noEffects();
    const pipeline = await evalPipeline(
      [
        { toolCalls: [{ name: 'stamp', arguments: { label: 'a' } }] },
        { toolCalls: [{ name: 'stamp', arguments: { label: 'a' } }] },
        { toolCalls: [{ name: 'stamp', arguments: { label: 'b' } }] },
        { content: 'tried to stamp thrice' },
      ],
      effects,
    );
    const run = await runCase(evalCase, { mode: 'model', pipeline });
    expect(run.status).toBe('completed');
    const [same, again, other] = results(run.events).map((e) => e.data);
    // The recorded call answers once, with what it returned; nothing stamps.
    expect(same).toMatchObject({ ok: true, output: 'stamped a' });
    const notRun = expect.stringContaining(
      'stamp was not run: the call is not in the recording, and model mode',
    );
    expect(again).toMatchObject({ ok: false, error: { code: 'not_run', message: notRun } });
    expect(other).toMatchObject({ ok: false, error: { code: 'not_run', message: notRun } });
    expect(effects.stamps).toEqual([]);
    expect(recorder.stamps).toEqual(['a']);
  });

  it('answers an approval the recording holds for the same call, and denies one it does not', async () => {
    const recorder = noEffects();
    const recordedOn = await evalPipeline(stampA, recorder, { askToStamp: true });
    const evalCase = await recordedCase(recordedOn, 'c1', 'stamp a', 'allow');
    expect(recorder.stamps).toEqual(['a']);
    // A server's run records the person's decision (an in-process one approves without asking anybody).
    const recording = evalCase.recording;
    const call = recording?.events.find((e) => e.kind === 'tool.call');
    if (!recording || call?.kind !== 'tool.call') throw new Error('the recorded run made no call');
    const factory = new EventFactory(systemClock);
    const { agent, stepId, callId, tool, arguments: args } = call.data;
    const asked = [
      factory.make('approval.requested', call, {
        agent,
        stepId,
        approvalId: 'ap1',
        callId,
        tool,
        arguments: args,
        reason: 'stamp asks',
        expiresAt: '2027-01-01T00:00:00.000Z',
      }),
      factory.make('approval.decided', call, {
        agent,
        stepId,
        approvalId: 'ap1',
        decision: 'allow',
        by: 'ann',
      }),
    ];
    recording.events.splice(recording.events.indexOf(call) + 1, 0, ...asked);
    const effects = noEffects();
    const pipeline = await evalPipeline(
      [
        { toolCalls: [{ name: 'stamp', arguments: { label: 'a' } }] },
        { toolCalls: [{ name: 'stamp', arguments: { label: 'b' } }] },
        { content: 'asked twice' },
      ],
      effects,
      { askToStamp: true },
    );
    const run = await runCase(evalCase, { mode: 'model', pipeline });
    const [allowed, denied] = results(run.events).map((e) => e.data);
    expect(allowed).toMatchObject({ ok: true, output: 'stamped a' });
    expect(denied).toMatchObject({ ok: false, error: { code: 'denied' } });
    expect(denied?.error?.message).toContain('the recording holds no approval of stamp with these arguments');
    expect(effects.stamps).toEqual([]);
  });

  it('answers memory from the recording or not at all: the run writes nothing to memory', async () => {
    const pipeline = await evalPipeline(
      [
        { toolCalls: [{ name: 'remember', arguments: { key: 'k', value: 'v', scope: 'task' } }] },
        { content: 'tried to remember' },
      ],
      noEffects(),
    );
    const run = await runCase({ id: 'memo', goal: 'remember' }, { mode: 'model', pipeline });
    expect(results(run.events)[0]?.data).toMatchObject({
      ok: false,
      error: {
        code: 'not_run',
        message:
          'remember was not run: the call is not in the recording and remember does not run in model mode',
      },
    });
  });

  it('refuses a module tool marked rerunnable but not read-only, and runs it when the eval names it', async () => {
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects, { rerunnableStamp: true });
    const refused = await runCase({ id: 'bare', goal: 'stamp a' }, { mode: 'model', pipeline });
    expect(results(refused.events)[0]?.data).toMatchObject({
      ok: false,
      error: { code: 'not_run', message: expect.stringContaining('(troupe eval run --run-tools stamp)') },
    });
    expect(effects.stamps).toEqual([]);
    const allowed = await runCase(
      { id: 'bare', goal: 'stamp a' },
      { mode: 'model', pipeline, runTools: ['stamp'] },
    );
    expect(results(allowed.events)[0]?.data).toMatchObject({ ok: true, output: 'stamped a' });
    expect(effects.stamps).toEqual(['a']);
  });

  it('refuses a case recorded on another pipeline, whose calls would answer this one’s, as a replay does', async () => {
    const evalCase = await recordedCase(await evalPipeline(stampA, noEffects()), 'c1', 'stamp a');
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects);
    const other = { ...pipeline, config: { ...pipeline.config, name: 'other' } };
    await expect(runCase(evalCase, { mode: 'model', pipeline: other })).rejects.toMatchObject({
      name: 'EvalsError',
      code: 'not_replayable',
      message:
        'case c1 was recorded on pipeline evaldemo, not other, and model mode answers its tools from that recording; run it with --mode live, or on a pipeline named evaldemo',
    });
    expect(effects.stamps).toEqual([]);
  });

  it('runs a case with no recording the same way, with no recorded call to match', async () => {
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects);
    const run = await runCase({ id: 'bare', goal: 'stamp a' }, { mode: 'model', pipeline });
    expect(run).toMatchObject({ status: 'completed', output: 'stamped a, done' });
    expect(results(run.events)[0]?.data).toMatchObject({ ok: false, error: { code: 'not_run' } });
    expect(effects.stamps).toEqual([]);
    expect(run.events[0]).toMatchObject({ kind: 'task.accepted', data: { goal: 'stamp a' } });
  });
});

describe('runCase: model, a remote agent', () => {
  it('calls no remote agent: its step answers as the recording had it, under the run’s own task', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-evalremote-'));
    try {
      await writeFile(
        join(dir, 'delegate.yaml'),
        `version: 1
name: delegate
agents:
  team:
    a2a: { card: 'http://127.0.0.1:9/never/.well-known/agent-card.json' }
flow:
  - { id: delegate, kind: agent, agent: team }
`,
      );
      const pipeline = await loadPipeline(join(dir, 'delegate.yaml'), { toolNames: builtinTools().names() });
      const factory = new EventFactory(systemClock);
      const scope = { pipeline: 'delegate', taskId: 'r1', traceparent: '' };
      const step = { step: 'delegate', agent: 'team', round: 1, stepId: 'r1.delegate.1' };
      const usage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 };
      const events = [
        factory.make('task.accepted', scope, { goal: 'hand it on' }),
        factory.make('step.started', scope, step),
        factory.make('step.completed', scope, {
          ...step,
          ok: true,
          output: 'the team did it',
          usage,
          turns: 1,
          durationMs: 5,
        }),
        factory.make('task.completed', scope, {
          output: 'the team did it',
          rounds: 1,
          usage,
          usageByAgent: {},
          durationMs: 5,
        }),
      ];
      const evalCase = {
        id: 'remote',
        goal: 'hand it on',
        recording: { taskId: 'r1', pipeline: 'delegate', events, journal: {}, values: {} },
      };
      const run = await runCase(evalCase, { mode: 'model', pipeline });
      expect(run).toMatchObject({ status: 'completed', output: 'the team did it' });
      expect(run.taskId).not.toBe('r1');
      const ended = run.events.find((e) => e.kind === 'step.completed');
      expect(ended?.data).toMatchObject({ ok: true, stepId: `${run.taskId}.delegate.1` });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('runCase: live', () => {
  it('runs the case as a real task: its tools run for real', async () => {
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects);
    const run = await runCase(
      { id: 'live', goal: 'stamp a', metadata: { ticket: 'T-1' } },
      { mode: 'live', pipeline },
    );
    expect(run).toMatchObject({ status: 'completed', output: 'stamped a, done' });
    expect(effects.stamps).toEqual(['a']);
    expect(run.events.at(-1)?.kind).toBe('task.completed');
    expect(run.events[0]).toMatchObject({ kind: 'task.accepted', data: { metadata: { ticket: 'T-1' } } });
  });

  it('denies what asks a person, unless the options allow it', async () => {
    const effects = noEffects();
    const pipeline = await evalPipeline(stampA, effects, { askToStamp: true });
    const denied = await runCase({ id: 'ask', goal: 'stamp a' }, { mode: 'live', pipeline });
    expect(results(denied.events)[0]?.data).toMatchObject({ ok: false, error: { code: 'denied' } });
    expect(effects.stamps).toEqual([]);
    await runCase({ id: 'ask', goal: 'stamp a' }, { mode: 'live', pipeline, approvals: 'allow' });
    expect(effects.stamps).toEqual(['a']);
  });
});
