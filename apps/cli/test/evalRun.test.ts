import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EvalStore, NewDataset } from '@troupe/client';
import { type Dataset, Experiment } from '@troupe/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type EvalRunOptions, type EvalRunStores, evalRun } from '../src/commands/evalRun.ts';

/** `troupe eval run` in this process, on a scripted pipeline: what it tells on stderr and its exit code. */
let dir: string;
const at = (name: string) => join(dir, name);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-evalrun-cli-'));
  await writeFile(at('script.json'), JSON.stringify({ agents: { writer: [{ content: 'hello' }] } }));
  await writeFile(
    at('greeter.yaml'),
    `version: 1
name: greeter
models: { scripted: { provider: scripted, script: ./script.json } }
defaults: { model: scripted }
agents:
  writer: { instructions: Say hello. }
flow:
  - { id: write, kind: agent, agent: writer }
`,
  );
  await writeFile(at('bare.jsonl'), `${JSON.stringify({ id: 'one', goal: 'say hello' })}\n`);
  await writeFile(
    at('scored.yaml'),
    'name: scored\nscorers:\n  - { type: contains, value: hello }\ncases:\n  - { id: one, goal: say hello }\n',
  );
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
afterEach(() => {
  vi.restoreAllMocks();
});

const options = (more: Partial<EvalRunOptions> = {}): EvalRunOptions => ({
  pipeline: at('greeter.yaml'),
  mode: 'live',
  concurrency: 1,
  format: 'json',
  store: false,
  allowMcpCommands: false,
  ...more,
});

/** Runs `eval run` with stdout and stderr caught. */
async function run(
  dataset: string,
  more: Partial<EvalRunOptions> = {},
  stores?: Parameters<typeof evalRun>[2],
) {
  let stderr = '';
  let stdout = '';
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    stderr += String(chunk);
    return true;
  });
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    stdout += String(chunk);
    return true;
  });
  const code = await evalRun(dataset, options(more), stores).finally(() => vi.restoreAllMocks());
  return { code, stderr, stdout };
}

describe('troupe eval run', () => {
  it('warns on stderr when the dataset has no scorers, and judges each case by its task alone', async () => {
    const bare = await run(at('bare.jsonl'));
    expect(bare.code, bare.stderr).toBe(0);
    expect(bare.stderr).toContain(
      'warning: bare@1 has no scorers: each case passes only if its task completes',
    );
    const scored = await run(at('scored.yaml'));
    expect(scored.code, scored.stderr).toBe(0);
    expect(scored.stderr).not.toContain('warning');
  });

  it('refuses a --name stored already before any case runs, unless --replace, which replaces it', async () => {
    const { stores, puts } = storesOf({ taken: ['baseline'] });
    await expect(run(at('scored.yaml'), { store: true, name: 'baseline' }, stores)).rejects.toMatchObject({
      exitCode: 2,
      message:
        'experiment baseline is stored already: give this run another --name, or pass --replace to replace it',
    });
    expect(puts).toEqual([]);
    const replaced = await run(at('scored.yaml'), { store: true, name: 'baseline', replace: true }, stores);
    expect(replaced.code, replaced.stderr).toBe(0);
    expect(puts).toEqual([{ id: 'baseline', replace: true }]);
    expect(replaced.stderr).toContain('stored experiment baseline');
  });

  it("prints the report and keeps the experiment when the store refuses it, with the run's exit code", async () => {
    const refusal =
      'this NATS user may not store datasets or experiments in troupe-evals (Permissions Violation)';
    const { stores } = storesOf({ refuse: refusal });
    const here = process.cwd();
    process.chdir(dir);
    try {
      const refused = await run(at('scored.yaml'), { store: true, name: 'nightly' }, stores);
      expect(refused.code, refused.stderr).toBe(0);
      expect(Experiment.parse(JSON.parse(refused.stdout)).id).toBe('nightly');
      expect(refused.stderr).toContain(`warning: cannot store experiment nightly: ${refusal}`);
      expect(refused.stderr).toContain('saved the experiment to nightly.json instead');
      expect(Experiment.parse(JSON.parse(await readFile(at('nightly.json'), 'utf8')))).toEqual(
        Experiment.parse(JSON.parse(refused.stdout)),
      );
      // With --save, that file has it.
      const saved = await run(
        at('scored.yaml'),
        { store: true, name: 'nightly-2', save: at('saved.json') },
        stores,
      );
      expect(saved.code, saved.stderr).toBe(0);
      expect(saved.stderr).toContain(`the experiment is in ${at('saved.json')}`);
    } finally {
      process.chdir(here);
    }
  });

  it('refuses what cannot run before any case runs (exit 2): a scorer that cannot be made, a judge without its key', async () => {
    await writeFile(
      at('broken.yaml'),
      `name: broken
scorers:
  - { type: cel, name: bad cel, expr: 'tools.called(' }
cases:
  - { id: one, goal: say hello }
  - id: two
    goal: say hello
    scorers: [{ type: module, name: gone, path: ./nope.ts }]
`,
    );
    const { stores, puts } = storesOf({});
    const broken = run(at('broken.yaml'), { store: true }, stores);
    await expect(broken).rejects.toMatchObject({ exitCode: 2 });
    const message = (await broken.catch((error: Error) => error.message)) as string;
    expect(message).toMatch(/^cannot run broken@1 on .*greeter\.yaml: the dataset's scorers: .*bad cel/);
    expect(message).toMatch(/case two: .*gone/);
    expect(puts).toEqual([]);
    // A judge whose model's key is not set, though the model is in the pipeline.
    await writeFile(
      at('judged.yaml'),
      `version: 1
name: greeter
models:
  scripted: { provider: scripted, script: ./script.json }
  grader: { provider: openai, model: gpt-4o-mini, apiKeyEnv: TROUPE_TEST_GRADER_KEY }
defaults: { model: scripted }
agents:
  writer: { instructions: Say hello. }
flow:
  - { id: write, kind: agent, agent: writer }
`,
    );
    await writeFile(
      at('judgedcases.yaml'),
      'name: judgedcases\nscorers:\n  - { type: judge, model: grader, rubric: Is it a greeting? }\ncases:\n  - { id: one, goal: say hello }\n',
    );
    delete process.env.TROUPE_TEST_GRADER_KEY;
    await expect(run(at('judgedcases.yaml'), { pipeline: at('judged.yaml') })).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining(
        'judge (grader) uses openai:gpt-4o-mini, which needs the environment variable TROUPE_TEST_GRADER_KEY; it is not set',
      ),
    });
  });

  it('reads a .json dataset file as a file, and a stored dataset with --no-store, storing nothing', async () => {
    await writeFile(
      at('asjson.json'),
      JSON.stringify({
        name: 'asjson',
        scorers: [{ type: 'contains', value: 'hello' }],
        cases: [{ id: 'one', goal: 'say hello' }],
      }),
    );
    const file = await run(at('asjson.json'));
    expect(file.code, file.stderr).toBe(0);
    expect(Experiment.parse(JSON.parse(file.stdout)).dataset).toEqual({ name: 'asjson', version: 1 });
    expect(file.stderr).toContain('running 1 case of asjson@1');
    const stored: Dataset = {
      name: 'kept',
      version: 4,
      createdAt: '2026-12-01T00:00:00.000Z',
      scorers: [{ type: 'contains', value: 'hello' }],
      cases: [{ id: 'one', goal: 'say hello' }],
    };
    const { stores, puts } = storesOf({ datasets: [stored] });
    const noStore = await run('kept@4', { store: false }, stores);
    expect(noStore.code, noStore.stderr).toBe(0);
    expect(Experiment.parse(JSON.parse(noStore.stdout)).dataset).toEqual({ name: 'kept', version: 4 });
    expect(puts).toEqual([]);
    expect(noStore.stderr).not.toContain('stored');
  });
});

/** A store in memory whose experiments `taken` are stored already, and whose puts fail with `refuse` when given. */
function storesOf(options: { taken?: string[]; refuse?: string; datasets?: Dataset[] }): {
  stores: EvalRunStores;
  puts: { id: string; replace: boolean | undefined }[];
} {
  const puts: { id: string; replace: boolean | undefined }[] = [];
  const store = {
    experiment: async (id: string) => (options.taken?.includes(id) ? { id } : undefined),
    dataset: async (name: string) => options.datasets?.find((d) => d.name === name),
    putDataset: async (content: NewDataset): Promise<Dataset> => ({
      ...content,
      version: 1,
      createdAt: new Date().toISOString(),
    }),
    putExperiment: async (experiment: Experiment, put: { replace?: boolean } = {}) => {
      if (options.refuse !== undefined) throw new Error(options.refuse);
      puts.push({ id: experiment.id, replace: put.replace });
    },
  };
  return { stores: { store: async () => store as unknown as EvalStore, close: async () => {} }, puts };
}
