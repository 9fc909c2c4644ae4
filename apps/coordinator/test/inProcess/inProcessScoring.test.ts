import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import { runTask } from '../../src/inProcessRun.ts';

const pipelineText = (evals: string) => `
version: 1
name: scored-run
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
    - { type: cel, name: one round, expr: 'steps.write.rounds == 1' }
    - { type: trajectory, of: steps, match: strict, expected: [write, review] }
`;

let dir: string;
const load = async (text: string): Promise<LoadedPipeline> => {
  const file = join(dir, `p${Math.random().toString(36).slice(2)}.yaml`);
  await writeFile(file, text);
  return loadPipeline(file, { toolNames: builtinTools().names() });
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-run-scored-'));
  await writeFile(join(dir, 'script.yaml'), 'agents:\n  writer:\n    - content: all done\n');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs one task of `pipeline` in-process: its events as `onEvent` heard them by the time the run resolved. */
async function run(pipeline: LoadedPipeline, taskId: string, onlineScoring?: boolean) {
  const events: TroupeEvent[] = [];
  const { final } = await runTask({
    pipeline,
    goal: 'write it',
    taskId,
    workspaceRoot: join(dir, 'workspaces'),
    onEvent: (event) => events.push(event),
    ...(onlineScoring === undefined ? {} : { onlineScoring }),
  });
  return { final, events: [...events] };
}

describe('troupe run (runTask) of a pipeline with an evals: block', () => {
  it('scores the task from the events the run made, and its eval.scored reaches onEvent, after the final event, before the run resolves', async () => {
    const pipeline = await load(pipelineText(EVALS));
    const { final, events } = await run(pipeline, 'scored-1');
    expect(final.kind).toBe('task.completed');
    expect(events.map((e) => e.kind).slice(-2)).toEqual(['task.completed', 'eval.scored']);
    const scored = events.at(-1);
    if (scored?.kind !== 'eval.scored') throw new Error('no eval.scored');
    expect(scored).toMatchObject({
      taskId: 'scored-1',
      pipeline: 'scored-run',
      traceparent: final.traceparent,
    });
    expect(scored.data).toMatchObject({ status: 'completed', pass: false, sample: 1, costUsd: 0 });
    expect(scored.data.scores.map((s) => [s.scorer, s.pass])).toEqual([
      ['contains "done"', true],
      // Read from the run's steps: the events the run made are what it scored.
      ['one round', true],
      ['trajectory strict (steps)', false],
    ]);
    expect(scored.data.scores[2]?.reason).toContain('write');
  });

  it('scores it once per run, as many runs as there are, with the same scorers', async () => {
    const pipeline = await load(pipelineText(EVALS));
    for (const taskId of ['again-1', 'again-2']) {
      const { events } = await run(pipeline, taskId);
      expect(events.filter((e) => e.kind === 'eval.scored').map((e) => e.taskId)).toEqual([taskId]);
    }
  });

  it('scores no task its sample leaves out, none without an evals: block, and none a caller opts out of', async () => {
    const none = await load(pipelineText(EVALS.replace('evals:', 'evals:\n  sample: 0')));
    const without = await load(pipelineText(''));
    const scored = await load(pipelineText(EVALS));
    const runs = [await run(none, 'out-1'), await run(without, 'out-2'), await run(scored, 'out-3', false)];
    for (const { final, events } of runs) {
      expect(final.kind).toBe('task.completed');
      expect(events.at(-1)).toEqual(final);
      expect(events.some((e) => e.kind === 'eval.scored')).toBe(false);
    }
  });
});
