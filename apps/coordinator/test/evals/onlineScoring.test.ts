import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EventData, type EventKind, emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { createLogger, EventFactory, systemClock } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import { missingCalls, OnlineScoring, type OnlineScoringOptions } from '../../src/evals/onlineScoring.ts';

const throwing = join(import.meta.dirname, 'fixtures', 'onlineThrows.mjs');

const pipelineText = (evals: string) => `
version: 1
name: online
models:
  scripted: { provider: scripted, script: ./script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: Write it. }
flow:
  - { id: write, kind: agent, agent: writer }
${evals}
`;

const EVALS = `
evals:
  scorers:
    - { type: contains, value: done }
    - { type: regex, name: digits only, pattern: '^\\d+$' }
    - { type: module, name: broken, path: ${throwing} }
`;

let dir: string;
const load = async (text: string): Promise<LoadedPipeline> => {
  const file = join(dir, `p${Math.random().toString(36).slice(2)}.yaml`);
  await writeFile(file, text);
  return loadPipeline(file, { toolNames: builtinTools().names() });
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-online-'));
  await writeFile(join(dir, 'script.yaml'), 'agents:\n  writer:\n    - content: done\n');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A task's events as its run published them, made by the runtime's EventFactory. */
function runOf(taskId: string, ending: 'completed' | 'failed', output = 'all done'): TroupeEvent[] {
  let now = Date.UTC(2026, 0, 1);
  const factory = new EventFactory({ now: () => (now += 10) });
  const scope = {
    pipeline: 'online',
    taskId,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  };
  const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
    factory.make(kind, scope, data);
  const usage = { ...emptyUsage(), modelCalls: 1, costUsd: 0.01 };
  return [
    make('task.accepted', { goal: 'write it', metadata: { team: 'a' } }),
    make('step.started', { step: 'write', agent: 'writer', round: 1, stepId: `${taskId}.write.1` }),
    ending === 'completed'
      ? make('task.completed', { output, rounds: 1, usage, usageByAgent: {}, durationMs: 20 })
      : make('task.failed', { reason: 'step_failed', message: 'the writer failed', usage, durationMs: 20 }),
  ];
}

/** Online scoring of `pipeline` over a fake bus and stream: what it publishes, and the events it reads back. */
function scoringOf(
  pipeline: LoadedPipeline,
  stream: Map<string, TroupeEvent[]>,
  extra: Partial<OnlineScoringOptions> = {},
) {
  const published: TroupeEvent[] = [];
  const scoring = new OnlineScoring(pipeline, {
    bus: {
      publishEvent: async (event) => {
        published.push(event);
        return true;
      },
    },
    events: new EventFactory(),
    clock: systemClock,
    logger: createLogger({ level: 'silent' }),
    taskEvents: async (taskId) => stream.get(taskId) ?? [],
    ...extra,
  });
  return { scoring, published };
}

const scoredOf = (published: TroupeEvent[], taskId: string) => {
  const event = published.find((e) => e.taskId === taskId && e.kind === 'eval.scored');
  return event?.kind === 'eval.scored' ? event : undefined;
};

describe('online scoring', () => {
  it("scores an ended task from its events, off its path, and publishes eval.scored on the task's subject", async () => {
    const pipeline = await load(pipelineText(EVALS));
    const events = runOf('t-pass', 'completed');
    const { scoring, published } = scoringOf(pipeline, new Map([['t-pass', events]]));
    const final = events.at(-1) as TroupeEvent;
    scoring.ended(final);
    await expect.poll(() => scoredOf(published, 't-pass')).toBeDefined();
    const scored = scoredOf(published, 't-pass');
    expect(scored).toMatchObject({ pipeline: 'online', taskId: 't-pass', traceparent: final.traceparent });
    expect(scored?.data).toMatchObject({ status: 'completed', pass: false, sample: 1, costUsd: 0 });
    expect(scored?.data.error).toBeUndefined();
    const scores = scored?.data.scores ?? [];
    expect(scores.map((s) => [s.scorer, s.value, s.pass])).toEqual([
      ['contains "done"', 1, true],
      ['digits only', 0, false],
      ['broken', 0, false],
    ]);
    // The scorer that throws is an error score; the others are still there.
    expect(scores[2]?.reason).toBe('error: this scorer is broken on purpose');
    // One score per task: its id is the task's, so a redelivery's score is stored once.
    expect(scored?.id).toBe('t-pass:eval.scored');
    await scoring.stop();
  });

  it('scores a failed task too (its scorers decide what a failure scores)', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const events = runOf('t-failed', 'failed');
    const { scoring, published } = scoringOf(pipeline, new Map([['t-failed', events]]));
    scoring.ended(events.at(-1) as TroupeEvent);
    await expect.poll(() => scoredOf(published, 't-failed')).toBeDefined();
    const data = scoredOf(published, 't-failed')?.data;
    expect(data?.status).toBe('failed');
    expect(data?.scores[0]).toMatchObject({ scorer: 'contains "done"', pass: false });
    await scoring.stop();
  });

  it('does not pass a failed task whose every score passes, as an experiment does not', async () => {
    const pipeline = await load(pipelineText("\nevals:\n  scorers:\n    - { type: cel, expr: 'true' }\n"));
    const stream = new Map([
      ['t-failed', runOf('t-failed', 'failed')],
      ['t-completed', runOf('t-completed', 'completed')],
    ]);
    const { scoring, published } = scoringOf(pipeline, stream);
    for (const events of stream.values()) scoring.ended(events.at(-1) as TroupeEvent);
    await expect
      .poll(() => scoredOf(published, 't-failed') && scoredOf(published, 't-completed'))
      .toBeDefined();
    expect(scoredOf(published, 't-failed')?.data).toMatchObject({ scores: [{ pass: true }], pass: false });
    expect(scoredOf(published, 't-completed')?.data).toMatchObject({ scores: [{ pass: true }], pass: true });
    await scoring.stop();
  });

  it('scores a task concluded again from its record once: not again when the stream has its eval.scored', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const events = runOf('t-again', 'completed');
    const final = events.at(-1) as TroupeEvent;
    const stream = new Map([['t-again', events]]);
    const first = scoringOf(pipeline, stream);
    first.scoring.ended(final);
    await first.scoring.scored('t-again');
    expect(first.published.map((e) => e.kind)).toEqual(['eval.scored']);
    // Its ack lost: the task is concluded again from its record, here or on another coordinator.
    stream.set('t-again', [...events, ...first.published]);
    const again = scoringOf(pipeline, stream);
    again.scoring.ended(final);
    await again.scoring.scored('t-again');
    expect(again.published).toEqual([]);
    await first.scoring.stop();
    await again.scoring.stop();
  });

  it('scores a task once when told of its end again while it is scored', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const events = runOf('t-twice', 'completed');
    const { scoring, published } = scoringOf(pipeline, new Map([['t-twice', events]]));
    scoring.ended(events.at(-1) as TroupeEvent);
    scoring.ended(events.at(-1) as TroupeEvent);
    await scoring.scored('t-twice');
    expect(published.map((e) => `${e.taskId} ${e.kind}`)).toEqual(['t-twice eval.scored']);
    await scoring.stop();
  });

  it('reads an output its final event kept only the start of from the value store', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const events = runOf('t-long', 'completed', 'the start…[99 more characters]');
    const final = events.at(-1) as TroupeEvent;
    if (final.kind !== 'task.completed') throw new Error('not completed');
    const ref = { bucket: 'troupe-values-online', name: 't-long.output', bytes: 12, sha256: 'a'.repeat(64) };
    final.data.outputRef = ref;
    const { scoring, published } = scoringOf(pipeline, new Map([['t-long', events]]), {
      values: { read: async (asked) => (asked === ref ? '12345 at last' : 'wrong') },
    });
    scoring.ended(final);
    await expect.poll(() => scoredOf(published, 't-long')).toBeDefined();
    // "done" is not in the preview; the whole output has digits but not only: both text scorers read the whole.
    expect(scoredOf(published, 't-long')?.data.scores.map((s) => s.pass)).toEqual([false, false, false]);
    expect(scoredOf(published, 't-long')?.data.scores[0]?.reason).not.toContain('start');
    await scoring.stop();
  });

  it('publishes the error, with no scores, when the run cannot be read', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const final = runOf('t-lost', 'completed').at(-1) as TroupeEvent;
    const { scoring, published } = scoringOf(pipeline, new Map(), {
      taskEvents: async () => {
        throw new Error('the EVENTS stream is out of reach');
      },
    });
    scoring.ended(final);
    await expect.poll(() => scoredOf(published, 't-lost')).toBeDefined();
    expect(scoredOf(published, 't-lost')?.data).toMatchObject({
      status: 'completed',
      scores: [],
      pass: false,
      error: 'the EVENTS stream is out of reach',
    });
    await scoring.stop();
  });

  it("reads the run again while a worker's model and tool events are not all stored yet", async () => {
    const pipeline = await load(
      pipelineText('evals:\n  scorers:\n    - { type: trajectory, match: strict, expected: [write_file] }'),
    );
    let now = Date.UTC(2026, 0, 1);
    const factory = new EventFactory({ now: () => (now += 10) });
    const scope = { pipeline: 'online', taskId: 't-late', traceparent: '' };
    const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
      factory.make(kind, scope, data);
    const call = { agent: 'writer', stepId: 't-late.write.1' };
    const reply = (turn: number, toolCalls: { id: string; name: string }[]) =>
      make('llm.response', {
        ...call,
        turn,
        provider: 'scripted',
        model: 'scripted',
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
        costUsd: 0,
        finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
        content: '',
        toolCalls,
        durationMs: 1,
      });
    const [accepted, started, first] = [
      make('task.accepted', { goal: 'write it' }),
      make('step.started', { step: 'write', round: 1, ...call }),
      reply(1, [{ id: 'c1', name: 'write_file' }]),
    ];
    const late = [
      make('tool.call', { ...call, turn: 1, index: 0, callId: 'c1', tool: 'write_file', arguments: '{}' }),
      make('tool.result', {
        ...call,
        turn: 1,
        index: 0,
        callId: 'c1',
        tool: 'write_file',
        ok: true,
        decision: 'allow',
        output: 'written',
        durationMs: 1,
      }),
      reply(2, []),
    ];
    const usage = { ...emptyUsage(), modelCalls: 2 };
    const ended = [
      make('step.completed', {
        step: 'write',
        round: 1,
        ...call,
        ok: true,
        output: 'done',
        usage,
        turns: 2,
        durationMs: 5,
      }),
      make('task.completed', { output: 'done', rounds: 1, usage, usageByAgent: {}, durationMs: 9 }),
    ];
    const whole = [accepted, started, first, ...late, ...ended] as TroupeEvent[];
    const cut = [accepted, started, first, ...ended] as TroupeEvent[];
    expect(missingCalls(cut)).toBe('step t-late.write.1: 1 of 2 model calls');
    expect(missingCalls(whole)).toBeUndefined();
    let reads = 0;
    const { scoring, published } = scoringOf(pipeline, new Map(), {
      // The worker's last events arrive after the task's end: the first read misses them.
      taskEvents: async () => (++reads === 1 ? cut : whole),
    });
    scoring.ended(whole.at(-1) as TroupeEvent);
    await expect.poll(() => scoredOf(published, 't-late')).toBeDefined();
    expect(reads).toBe(2);
    expect(scoredOf(published, 't-late')?.data.scores[0]).toMatchObject({ value: 1, pass: true });
    await scoring.stop();
  });

  it('scores the events handed to it as they are: the stream is not read, nor read again', async () => {
    const pipeline = await load(pipelineText(EVALS));
    // Without its task.accepted: a stream read would find them and the goal would be the task's.
    const events = runOf('t-handed', 'completed', 'done').slice(1);
    let reads = 0;
    const { scoring, published } = scoringOf(pipeline, new Map(), {
      taskEvents: async () => {
        reads += 1;
        throw new Error('an in-process run has no stream');
      },
    });
    // Its final event among them or not: it is scored with them.
    scoring.ended(events.at(-1) as TroupeEvent, undefined, events.slice(0, -1));
    await scoring.scored('t-handed');
    expect(reads).toBe(0);
    const data = scoredOf(published, 't-handed')?.data;
    expect(data?.error).toBeUndefined();
    expect(data).toMatchObject({ status: 'completed' });
    expect(data?.scores[0]).toMatchObject({ scorer: 'contains "done"', pass: true });
    await scoring.stop();
  });

  it("frees its slot from a module scorer that never answers once the scorer's time limit passes, scoring it an error", async () => {
    const never = join(import.meta.dirname, 'fixtures', 'neverScores.mjs');
    const pipeline = await load(
      pipelineText(
        `evals:\n  scorers:\n    - { type: module, name: stuck, path: ${never}, timeoutMs: 100 }\n    - { type: contains, value: done }`,
      ),
    );
    // More stuck tasks than scoring slots (4): each slot is given back, and every task is scored.
    const ids = ['s-1', 's-2', 's-3', 's-4', 's-5', 's-6'];
    const runs = ids.map((id) => runOf(id, 'completed'));
    const { scoring, published } = scoringOf(pipeline, new Map(runs.map((r, i) => [ids[i] ?? '', r])));
    for (const events of runs) scoring.ended(events.at(-1) as TroupeEvent);
    await expect.poll(() => published.length, { timeout: 5_000 }).toBe(ids.length);
    for (const id of ids) {
      expect(scoredOf(published, id)?.data.scores.map((s) => [s.scorer, s.pass, s.reason])).toEqual([
        ['stuck', false, "error: timed out: no score after 0.1 s (the scorer's timeoutMs)"],
        ['contains "done"', true, expect.any(String)],
      ]);
    }
    await scoring.stop();
  });

  it('scores no task out of the sample, and nothing without an evals block', async () => {
    const none = await load(pipelineText(EVALS.replace('evals:', 'evals:\n  sample: 0')));
    const without = await load(pipelineText(''));
    const events = runOf('t-out', 'completed');
    for (const pipeline of [none, without]) {
      const { scoring, published } = scoringOf(pipeline, new Map([['t-out', events]]));
      scoring.ended(events.at(-1) as TroupeEvent);
      expect(scoring.pending).toBe(0);
      await scoring.stop();
      expect(published).toEqual([]);
    }
  });
});

describe('online scoring of a task that ran on another version of the pipeline', () => {
  const block = (name: string, value: string, sample = '') =>
    `evals:${sample}\n  scorers:\n    - { type: contains, name: ${name}, value: ${value} }`;
  const namesOf = (published: TroupeEvent[], taskId: string) =>
    scoredOf(published, taskId)?.data.scores.map((s) => s.scorer);

  it("scores it by that version's evals block, the version loaded and its scorers made once for all its tasks", async () => {
    const current = await load(pipelineText(block('current', 'done')));
    const older = await load(pipelineText(block('older', 'nope')));
    const hash = 'b'.repeat(64);
    const runs = ['t-old-1', 't-old-2', 't-new'].map((id) => runOf(id, 'completed'));
    const stream = new Map(runs.map((events) => [events[0]?.taskId ?? '', events]));
    const asked: string[] = [];
    const { scoring, published } = scoringOf(current, stream, {
      loadVersion: async (version) => {
        asked.push(version);
        return version === hash ? older : undefined;
      },
    });
    const [old1, old2, fresh] = runs.map((events) => events.at(-1) as TroupeEvent);
    scoring.ended(old1 as TroupeEvent, hash);
    scoring.ended(old2 as TroupeEvent, hash);
    scoring.ended(fresh as TroupeEvent, current.version.hash);
    await expect.poll(() => published.length).toBe(3);
    expect(namesOf(published, 't-old-1')).toEqual(['older']);
    expect(namesOf(published, 't-old-2')).toEqual(['older']);
    expect(scoredOf(published, 't-old-1')?.data.pass).toBe(false);
    expect(namesOf(published, 't-new')).toEqual(['current']);
    expect(scoredOf(published, 't-new')?.data.pass).toBe(true);
    expect(asked).toEqual([hash]);
    // Known from then on: a later task of that version loads nothing.
    const later = runOf('t-old-3', 'completed');
    stream.set('t-old-3', later);
    scoring.ended(later.at(-1) as TroupeEvent, hash);
    await expect.poll(() => namesOf(published, 't-old-3')).toEqual(['older']);
    expect(asked).toEqual([hash]);
    await scoring.stop();
  });

  it("samples by that version's block: a version with none scores nothing, and one whose block samples all scores all", async () => {
    const current = await load(pipelineText(block('current', 'done', '\n  sample: 0')));
    const without = await load(pipelineText(''));
    const everything = await load(pipelineText(block('all', 'done')));
    const [none, all] = ['c'.repeat(64), 'd'.repeat(64)];
    const runs = ['t-none', 't-all', 't-current'].map((id) => runOf(id, 'completed'));
    const stream = new Map(runs.map((events) => [events[0]?.taskId ?? '', events]));
    const { scoring, published } = scoringOf(current, stream, {
      loadVersion: async (version) => (version === none ? without : version === all ? everything : undefined),
    });
    const [a, b, c] = runs.map((events) => events.at(-1) as TroupeEvent);
    scoring.ended(a as TroupeEvent, none);
    scoring.ended(b as TroupeEvent, all);
    scoring.ended(c as TroupeEvent, current.version.hash);
    await expect.poll(() => namesOf(published, 't-all')).toEqual(['all']);
    await expect.poll(() => scoring.pending).toBe(0);
    expect(published.map((e) => e.taskId)).toEqual(['t-all']);
    await scoring.stop();
  });

  it('after a reload, scores a task of the version loaded before by its own block, and one of an unstored version not at all', async () => {
    const first = await load(pipelineText(block('first', 'done')));
    const reloaded = await load(pipelineText(block('reloaded', 'done')));
    const runs = ['t-first', 't-reloaded', 't-lost'].map((id) => runOf(id, 'completed'));
    const stream = new Map(runs.map((events) => [events[0]?.taskId ?? '', events]));
    const asked: string[] = [];
    const { scoring, published } = scoringOf(first, stream, {
      loadVersion: async (version) => {
        asked.push(version);
        return undefined;
      },
    });
    scoring.use(reloaded);
    const [a, b, c] = runs.map((events) => events.at(-1) as TroupeEvent);
    scoring.ended(a as TroupeEvent, first.version.hash);
    scoring.ended(b as TroupeEvent, reloaded.version.hash);
    scoring.ended(c as TroupeEvent, 'e'.repeat(64));
    await expect.poll(() => published.length).toBe(2);
    await expect.poll(() => scoring.pending).toBe(0);
    expect(namesOf(published, 't-first')).toEqual(['first']);
    expect(namesOf(published, 't-reloaded')).toEqual(['reloaded']);
    expect(scoredOf(published, 't-lost')).toBeUndefined();
    expect(asked).toEqual(['e'.repeat(64)]);
    await scoring.stop();
  });
});

describe("a pipeline's evals block at load", () => {
  const refused = async (evals: string): Promise<string> =>
    load(pipelineText(evals)).then(
      () => 'loaded',
      (error: Error) => error.message,
    );

  it('refuses a scorer that cannot be made, naming the scorer, its place and what is wrong', async () => {
    const message = await refused(`
evals:
  scorers:
    - { type: contains, value: ok }
    - { type: regex, pattern: '(unclosed' }
    - { type: judge, rubric: Is it good?, model: grader }
    - { type: exact }
`);
    expect(message).toMatch(/evals\.scorers\[1\]: scorer 2 \(regex \/\(unclosed\/\): .+/);
    expect(message).toMatch(/evals\.scorers\[2\]: scorer 3 \(judge \(grader\)\): .*grader/);
    expect(message).toMatch(/evals\.scorers\[3\]: scorer 4 \(exact \(expected\)\): .+/);
    expect(message).not.toContain('scorers[0]');
  });

  it('refuses a misspelt field, a rate above 1 and an empty list, naming the field', async () => {
    expect(await refused('evals:\n  scorers:\n    - { type: contains, value: ok, treshold: 0.5 }')).toContain(
      'evals.scorers[0].treshold: unknown key "treshold" (did you mean "threshold"?)',
    );
    expect(await refused('evals:\n  sample: 1.5\n  scorers:\n    - { type: contains, value: ok }')).toContain(
      'evals.sample:',
    );
    expect(await refused('evals:\n  scorers: []')).toContain('evals.scorers: name at least one scorer');
    expect(await refused('evals:\n  scorers:\n    - { type: regex }')).toContain(
      'evals.scorers[0].pattern: missing',
    );
  });

  it("refuses a judge whose model's API key is not set, as an agent's", async () => {
    const file = join(dir, 'judged.yaml');
    await writeFile(
      file,
      pipelineText(`
evals:
  scorers:
    - { type: judge, name: grade, rubric: Is it good?, model: grader }
`).replace('models:', 'models:\n  grader: { provider: openai, model: gpt-5-mini }'),
    );
    const message = await loadPipeline(file, { toolNames: builtinTools().names(), env: {} }).then(
      () => 'loaded',
      (error: Error) => error.message,
    );
    expect(message).toContain(
      'evals.scorers[0].model: judge grade uses openai:gpt-5-mini, which needs the environment variable OPENAI_API_KEY; it is not set',
    );
    const keyed = await loadPipeline(file, {
      toolNames: builtinTools().names(),
      env: { OPENAI_API_KEY: 'k' },
    });
    expect(keyed.config.evals?.scorers).toHaveLength(1);
  });
});
