import type { EvalCase } from '@troupe/protocol';
import { afterAll, describe, expect, it } from 'vitest';
import { caseRunOf } from '../../src/evals/caseRun.ts';
import { EvalsError } from '../../src/evals/evalsError.ts';
import { runCase } from '../../src/evals/runCase.ts';
import { makeScorers, scorerProblems } from '../../src/evals/scoreCase.ts';
import { evalPipeline, noEffects, recordedCase, removePipelines } from './runSupport.ts';
import { eventsOf, noteCase } from './scoredRuns.ts';

afterAll(removePipelines);

/** What a call threw, for its code and message. */
async function thrown(call: () => unknown): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  throw new Error('it did not throw');
}

describe("an eval's errors carry a stable code", () => {
  it('invalid_scorer: a scorer that cannot be made, named by its place and name, its cause kept', async () => {
    const error = await thrown(() =>
      makeScorers(
        [
          { type: 'contains', value: 'x' },
          { type: 'regex', pattern: '(' },
        ],
        { baseDir: '.' },
      ),
    );
    expect(EvalsError.is(error, 'invalid_scorer')).toBe(true);
    expect((error as Error).message).toMatch(/^scorer 2 \(regex \/\(\/\): /);
    expect((error as Error).cause).toBeInstanceOf(Error);
  });

  it('invalid_scorer, from scorerProblems: every scorer that cannot be made, each numbered by its own place', () => {
    const problems = scorerProblems(
      [
        { type: 'contains', value: 'x' },
        { type: 'regex', pattern: '(' },
        { type: 'exact', value: 'y' },
        { type: 'cel', name: 'broken', expr: 'output ==' },
      ],
      { baseDir: '.' },
    );
    expect(problems.map(({ index }) => index)).toEqual([1, 3]);
    expect(problems.every(({ error }) => EvalsError.is(error, 'invalid_scorer'))).toBe(true);
    expect(problems[0]?.error.message).toMatch(/^scorer 2 \(regex \/\(\/\): /);
    expect(problems[1]?.error.message).toMatch(/^scorer 4 \(broken\): /);
  });

  it('run_not_ended: a run with no events, or whose task has no final event', async () => {
    const none = await thrown(() => caseRunOf(noteCase, []));
    expect(EvalsError.is(none, 'run_not_ended')).toBe(true);
    const unfinished = eventsOf({}).filter((event) => event.kind !== 'task.completed');
    const cut = await thrown(() => caseRunOf(noteCase, unfinished));
    expect(EvalsError.is(cut, 'run_not_ended')).toBe(true);
    expect((cut as Error).message).toContain('has no final event');
  });

  it('not_replayable and incomplete_recording: a replay of a case without a recording, of another pipeline, or cut', async () => {
    const pipeline = await evalPipeline([{ content: 'done' }], noEffects());
    const bare: EvalCase = { id: 'bare', goal: 'do it' };
    expect(
      EvalsError.is(await thrown(() => runCase(bare, { mode: 'replay', pipeline })), 'not_replayable'),
    ).toBe(true);
    const recorded = await recordedCase(pipeline, 'rec', 'do it');
    const recording = recorded.recording;
    if (!recording) throw new Error('no recording');
    const elsewhere = { ...recorded, recording: { ...recording, pipeline: 'other' } };
    const moved = await thrown(() => runCase(elsewhere, { mode: 'replay', pipeline }));
    expect(EvalsError.is(moved, 'not_replayable')).toBe(true);
    expect((moved as Error).message).toContain('was recorded on pipeline other');
    const cut = {
      ...recorded,
      recording: { ...recording, events: recording.events.filter((e) => e.kind !== 'task.accepted') },
    };
    const error = await thrown(() => runCase(cut, { mode: 'replay', pipeline }));
    expect(EvalsError.is(error, 'incomplete_recording')).toBe(true);
    expect(EvalsError.is(new Error('x'))).toBe(false);
  });
});
