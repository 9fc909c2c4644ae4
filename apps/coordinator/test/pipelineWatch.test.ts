import { mkdtemp, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '@troupe/runtime';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { builtinTools } from '../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../src/config/loadPipeline.ts';
import type { PipelineReload } from '../src/coordinator.ts';
import { type PipelineWatch, type ReloadOutcome, watchPipelines } from '../src/pipelineWatch.ts';

/** The directory watchers open now: each `fs.watch` is counted until it is closed. */
const watchers = vi.hoisted(() => new Set<unknown>());
vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const watch = ((...args: Parameters<typeof fs.watch>) => {
    const watcher = fs.watch(...args);
    watchers.add(watcher);
    const close = watcher.close.bind(watcher);
    watcher.close = () => {
      watchers.delete(watcher);
      close();
    };
    return watcher;
  }) as typeof fs.watch;
  return { ...fs, watch, default: { ...fs, watch } };
});

const pipelineText = (name: string, instructions: string) => `version: 1
name: ${name}
models:
  scripted: { provider: scripted, script: ./${name}.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: ${instructions} }
flow:
  - { id: write, kind: agent, agent: writer }
`;
const scriptText = (reply: string) => `agents:\n  writer:\n    - content: ${reply}\n`;

describe('watchPipelines', () => {
  let dir: string;
  let watching: PipelineWatch | undefined;
  const outcomes: ReloadOutcome[] = [];
  const reloaded: LoadedPipeline[] = [];
  const load = (file: string) => loadPipeline(file, { toolNames: builtinTools().names() });
  const reload = async (next: LoadedPipeline): Promise<PipelineReload> => {
    reloaded.push(next);
    return { pipeline: next.config.name, to: next.version.hash };
  };

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-watch-unit-'));
    outcomes.length = 0;
    reloaded.length = 0;
  });
  afterEach(async () => {
    await watching?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** Writes a pipeline and its script, loads it, and watches it. */
  async function watched(...names: string[]): Promise<string[]> {
    const files: string[] = [];
    for (const name of names) {
      const file = join(dir, `${name}.yaml`);
      await writeFile(file, pipelineText(name, 'Write.'));
      await writeFile(join(dir, `${name}.script.yaml`), scriptText('one'));
      files.push(file);
    }
    watching = watchPipelines({
      pipelines: await Promise.all(files.map(load)),
      load,
      reload,
      logger: createLogger({ level: 'silent' }),
      debounceMs: 200,
      onOutcome: (outcome) => outcomes.push(outcome),
    });
    return files;
  }
  const until = <T>(find: () => T | undefined) =>
    vi.waitFor(
      () => {
        const found = find();
        if (found === undefined) throw new Error(`not yet; outcomes: ${JSON.stringify(outcomes)}`);
        return found;
      },
      { timeout: 5_000, interval: 20 },
    );
  const nth = (kind: ReloadOutcome['kind'], n: number) => () =>
    outcomes.filter((o) => o.kind === kind)[n - 1];

  it('reloads a file saved by writing another and renaming it over the old one', async () => {
    const [file = ''] = await watched('alpha');
    await writeFile(`${file}.new`, pipelineText('alpha', 'Write it well.'));
    await rename(`${file}.new`, file);
    const outcome = await until(nth('reloaded', 1));
    expect(outcome).toMatchObject({ kind: 'reloaded', pipeline: 'alpha', file });
    expect(reloaded[0]?.config.agents.writer?.instructions).toBe('Write it well.');
    expect(outcome.kind === 'reloaded' && outcome.message).toMatch(
      /^pipeline alpha reloaded from .*alpha\.yaml: version [0-9a-f]{12} → [0-9a-f]{12}; new tasks start on/,
    );
  });

  it('reloads when a script the pipeline names changes', async () => {
    await watched('alpha');
    await writeFile(join(dir, 'alpha.script.yaml'), scriptText('two'));
    await until(nth('reloaded', 1));
    expect(reloaded[0]?.version.files['./alpha.script.yaml']).toContain('two');
  });

  it('makes one reload of a burst of writes, and none of a save that changes nothing', async () => {
    const [file = ''] = await watched('alpha');
    for (const text of ['First.', 'Second.', 'Third.']) await writeFile(file, pipelineText('alpha', text));
    await until(nth('reloaded', 1));
    await writeFile(file, `# a comment only\n${pipelineText('alpha', 'Third.')}`);
    await until(nth('unchanged', 1));
    await watching?.settled();
    expect(reloaded.map((p) => p.config.agents.writer?.instructions)).toEqual(['Third.']);
  });

  it('refuses a save that does not load, naming file and line, and takes the next good one', async () => {
    const [file = ''] = await watched('alpha');
    const served = outcomes.length;
    await writeFile(file, pipelineText('alpha', 'Write.').replace('agent: writer', 'agent: writr'));
    const refused = await until(nth('refused', 1));
    expect(outcomes.length).toBe(served + 1);
    expect(refused.kind === 'refused' && refused.message).toMatch(
      /^pipeline alpha: .*alpha\.yaml not reloaded, version [0-9a-f]{12} keeps serving: .*alpha\.yaml:9:\d+ flow\[0\]\.agent: no agent named "writr"/,
    );
    // Gone, then written back: refused, then reloaded.
    await unlink(file);
    expect((await until(nth('refused', 2))).kind === 'refused' && outcomes.at(-1)).toMatchObject({
      message: expect.stringMatching(/alpha\.yaml: no such file$/),
    });
    await writeFile(file, pipelineText('alpha', 'Write again.'));
    await until(nth('reloaded', 1));
    expect(reloaded).toHaveLength(1);
  });

  it('refuses a file that names another pipeline, and follows several files each on its own', async () => {
    const [alpha = '', beta = ''] = await watched('alpha', 'beta');
    await writeFile(alpha, pipelineText('alpha', 'Write.').replace('name: alpha', 'name: gamma'));
    const refused = await until(nth('refused', 1));
    expect(refused.kind === 'refused' && refused.message).toMatch(
      /now names pipeline gamma; a reload keeps a file's pipeline, so restart to run gamma/,
    );
    await writeFile(beta, pipelineText('beta', 'Write beta.'));
    await until(nth('reloaded', 1));
    expect(reloaded.map((p) => p.config.name)).toEqual(['beta']);
  });

  it('keeps the version serving when the coordinator refuses it', async () => {
    const [file = ''] = await watched('alpha');
    await watching?.close();
    watching = watchPipelines({
      pipelines: [await load(file)],
      load,
      reload: async () => {
        throw new Error('the versions bucket is out of reach');
      },
      logger: createLogger({ level: 'silent' }),
      debounceMs: 200,
      onOutcome: (outcome) => outcomes.push(outcome),
    });
    await writeFile(file, pipelineText('alpha', 'Changed.'));
    const refused = await until(nth('refused', 1));
    expect(refused.kind === 'refused' && refused.message).toMatch(
      /keeps serving: the versions bucket is out of reach$/,
    );
  });

  it('leaves no directory watched once closed, even when it closes during a reload', async () => {
    const [file = ''] = await watched('alpha');
    await watching?.close();
    expect(watchers.size).toBe(0);
    let release = () => {};
    const loading = new Promise<void>((resolve) => {
      release = resolve;
    });
    let loads = 0;
    watching = watchPipelines({
      pipelines: [await load(file)],
      load: async (path) => {
        loads += 1;
        await loading;
        return load(path);
      },
      reload,
      logger: createLogger({ level: 'silent' }),
      debounceMs: 200,
      onOutcome: (outcome) => outcomes.push(outcome),
    });
    expect(watchers.size).toBe(1);
    await writeFile(file, pipelineText('alpha', 'Changed.'));
    await vi.waitFor(() => expect(loads).toBe(1), { timeout: 5_000, interval: 20 });
    // Stopped while the reload is under way: the reload finishes, and no watcher is opened again after it.
    const closing = watching.close();
    release();
    await closing;
    expect(outcomes.at(-1)).toMatchObject({ kind: 'reloaded' });
    expect(watchers.size).toBe(0);
  });

  it('says a changed tool module needs a restart, and reloads nothing for it', async () => {
    const module = (reply: string) =>
      `import { z } from 'zod';\nexport default { name: 'echo', description: 'Echo', input: z.object({}), run: async () => '${reply}' };\n`;
    await writeFile(join(dir, 'echo.mjs'), module('one'));
    const file = join(dir, 'alpha.yaml');
    await writeFile(
      file,
      pipelineText('alpha', 'Write.').replace('agents:', 'tools: { modules: [./echo.mjs] }\nagents:'),
    );
    await writeFile(join(dir, 'alpha.script.yaml'), scriptText('one'));
    watching = watchPipelines({
      pipelines: [await load(file)],
      load,
      reload,
      logger: createLogger({ level: 'silent' }),
      debounceMs: 200,
      onOutcome: (outcome) => outcomes.push(outcome),
    });
    await writeFile(join(dir, 'echo.mjs'), module('two'));
    const outcome = await until(nth('restart', 1));
    expect(outcome).toEqual({
      kind: 'restart',
      file,
      pipeline: 'alpha',
      module: './echo.mjs',
      message: `pipeline alpha: its tool module ./echo.mjs changed, but tool modules are loaded once, at start: the tools that run are still those loaded then; restart troupe up (and the workers that load it) to run the change`,
    });
    await watching.settled();
    expect(outcomes.map((o) => o.kind)).toEqual(['restart']);
    expect(reloaded).toEqual([]);
  });
});
