import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { createLogger, EventFactory, systemClock } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import type { ImportModule } from '../../src/config/toolModules.ts';
import { OnlineScoring } from '../../src/evals/onlineScoring.ts';
import { makeScorers, scoreRun } from '../../src/evals/scoreCase.ts';
import { pipelineText, runOf } from './scoredRuns.ts';

/**
 * A module scorer is imported as its pipeline's tool modules are: by the importer `troupe` gives `loadPipeline`
 * (which loads TypeScript), not by one of the coordinator's own. The module on disk scores 0.1; the importer's 0.9.
 */
let dir: string;
let grade: string;
const imported: string[] = [];
const importer: ImportModule = async (file) => {
  imported.push(file);
  return { score: () => ({ value: 0.9, reason: 'through the importer' }) };
};

const EVALS = `
evals:
  scorers:
    - { type: module, name: grade, path: ./grade.ts }
`;

const load = async (name: string, text: string, importModule?: ImportModule): Promise<LoadedPipeline> => {
  await writeFile(join(dir, name), text);
  return loadPipeline(join(dir, name), {
    toolNames: builtinTools().names(),
    ...(importModule ? { importModule } : {}),
  });
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-module-import-'));
  grade = join(dir, 'grade.ts');
  await writeFile(grade, 'export const score = (_run: unknown): number => 0.1;\n');
  await writeFile(join(dir, 'script.yaml'), 'agents:\n  writer:\n    - content: done\n');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** A task that was accepted and completed, with no step: nothing for online scoring to read again. */
function ended(taskId: string): TroupeEvent[] {
  const factory = new EventFactory();
  const scope = {
    pipeline: 'notes',
    taskId,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  };
  return [
    factory.make('task.accepted', scope, { goal: 'write it' }),
    factory.make('task.completed', scope, {
      output: 'done',
      rounds: 1,
      usage: emptyUsage(),
      usageByAgent: {},
      durationMs: 5,
    }),
  ];
}

const scripted = '  scripted: { provider: scripted, script: ./script.yaml }';

describe("a module scorer's import", () => {
  it('goes through the importer its pipeline was loaded with, once for every run it scores', async () => {
    imported.length = 0;
    const pipeline = await load('notes.yaml', pipelineText(scripted, 'scripted'), importer);
    const scorers = makeScorers([{ type: 'module', path: './grade.ts' }], { baseDir: dir, pipeline });
    const context = { pipeline, baseDir: dir };
    const first = await scoreRun(runOf({ output: 'A note.' }), scorers, context);
    const second = await scoreRun(runOf({ output: 'Another.' }), scorers, context);
    expect([first[0]?.value, second[0]?.value]).toEqual([0.9, 0.9]);
    expect(first[0]?.reason).toBe('through the importer');
    expect(imported).toEqual([grade]);
  });

  it("goes through an importer given to makeScorers before the pipeline's, and through Node's import() with none", async () => {
    const pipeline = await load('plain.yaml', pipelineText(scripted, 'scripted'));
    const given = makeScorers([{ type: 'module', path: './grade.ts' }], {
      baseDir: dir,
      pipeline,
      importModule: importer,
    });
    const [viaGiven] = await scoreRun(runOf({}), given, { pipeline, baseDir: dir });
    expect(viaGiven?.value).toBe(0.9);
    // The test runner strips types, as tsx would: the module's own answer.
    const plain = makeScorers([{ type: 'module', path: './grade.ts' }], { baseDir: dir, pipeline });
    const [viaNode] = await scoreRun(runOf({}), plain, { pipeline, baseDir: dir });
    expect(viaNode?.value).toBe(0.1);
  });

  it("goes through this process's importer online, for a stored version too (loaded with none of its own)", async () => {
    imported.length = 0;
    const current = await load('online.yaml', pipelineText(scripted, 'scripted') + EVALS, importer);
    const stored = await load('stored.yaml', `${pipelineText(scripted, 'scripted')}${EVALS}  sample: 1\n`);
    const hash = 'e'.repeat(64);
    const runs = new Map(['t-current', 't-stored'].map((id) => [id, ended(id)]));
    const published: TroupeEvent[] = [];
    const scoring = new OnlineScoring(current, {
      bus: { publishEvent: async (event) => Boolean(published.push(event)) },
      events: new EventFactory(),
      clock: systemClock,
      logger: createLogger({ level: 'silent' }),
      taskEvents: async (taskId) => runs.get(taskId) ?? [],
      loadVersion: async (version) => (version === hash ? stored : undefined),
    });
    scoring.ended(runs.get('t-current')?.at(-1) as TroupeEvent, current.version.hash);
    scoring.ended(runs.get('t-stored')?.at(-1) as TroupeEvent, hash);
    await expect.poll(() => published.length).toBe(2);
    const values = published.map((event) =>
      event.kind === 'eval.scored' ? [event.taskId, event.data.scores[0]?.value] : [],
    );
    expect(values.sort()).toEqual([
      ['t-current', 0.9],
      ['t-stored', 0.9],
    ]);
    await scoring.stop();
  });
});
