import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { builtinTools } from '../src/config/builtinTools.ts';
import { ConfigError } from '../src/config/configError.ts';
import { loadPipeline } from '../src/config/loadPipeline.ts';
import type { ImportModule } from '../src/config/toolModules.ts';

const toolNames = builtinTools().names();

const wordCount = {
  name: 'word_count',
  description: 'Count the words of a text',
  input: z.object({ text: z.string().describe('The text to count') }),
  run: async ({ text }: { text: string }) => `${text.split(/\s+/).filter(Boolean).length} words`,
};
const shout = { ...wordCount, name: 'shout', description: 'Upper-case a text' };
const whisper = { ...wordCount, name: 'whisper', description: 'Lower-case a text' };

/**
 * A pipeline in a fresh directory whose modules are files there (the loader looks for them on disk) and whose
 * exports the test gives, through an injected import.
 */
async function pipelineWith(
  modules: Record<string, Record<string, unknown> | Error>,
  options: { tools?: string[]; moduleList?: string[] } = {},
): Promise<{ file: string; dir: string; text: string; importModule: ImportModule }> {
  const dir = await mkdtemp(join(tmpdir(), 'troupe-toolmodules-'));
  dirs.push(dir);
  await mkdir(join(dir, 'tools'));
  for (const path of Object.keys(modules))
    await writeFile(join(dir, path), '// the test gives the exports\n');
  await writeFile(join(dir, 'demo.script.yaml'), 'agents:\n  writer:\n    - content: done\n');
  const list = options.moduleList ?? Object.keys(modules).map((path) => `./${path}`);
  const text = `version: 1
name: own-tools
models:
  scripted: { provider: scripted, script: ./demo.script.yaml }
defaults: { model: scripted }
tools:
  modules:
${list.map((m) => `    - ${m}`).join('\n')}
agents:
  writer:
    instructions: Write.
    tools: [${(options.tools ?? ['read_file']).join(', ')}]
flow:
  - { id: write, kind: agent, agent: writer }
`;
  const file = join(dir, 'pipeline.yaml');
  await writeFile(file, text);
  const importModule: ImportModule = async (path) => {
    const relative = path.slice(dir.length + 1);
    const exported = modules[relative];
    if (exported === undefined) throw new Error(`test setup: no exports for ${relative}`);
    if (exported instanceof Error) throw exported;
    return exported;
  };
  return { file, dir, text, importModule };
}

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function refusal(file: string, importModule: ImportModule): Promise<ConfigError> {
  const error = await loadPipeline(file, { toolNames, importModule }).catch((e: unknown) => e);
  if (!(error instanceof ConfigError)) throw new Error(`expected a ConfigError, got ${String(error)}`);
  return error;
}

const lineOf = (text: string, needle: string) => text.split('\n').findIndex((l) => l.includes(needle)) + 1;

describe('tool modules named by a pipeline file', () => {
  it("gives the file's agents the tools its modules export: default, arrays and named exports", async () => {
    const { file, importModule } = await pipelineWith(
      {
        'tools/count.ts': { default: wordCount, helper: 42, options: { verbose: true } },
        'tools/case.ts': { default: [shout], whisper },
      },
      { tools: ['word_count', 'shout', 'whisper', 'read_file'] },
    );
    const loaded = await loadPipeline(file, { toolNames, importModule });
    expect(loaded.tools.map((t) => t.name).sort()).toEqual(['shout', 'whisper', 'word_count']);
    const tool = loaded.tools.find((t) => t.name === 'word_count');
    expect(tool).toMatchObject({ description: wordCount.description, input: wordCount.input });
    expect(await tool?.run({ text: 'one two three' }, {} as never)).toBe('3 words');
  });

  it("runs a plain module's run that returns its text without a promise, and refuses an export that throws when read", async () => {
    const hostile = Object.defineProperty({ run: () => '' }, 'name', {
      enumerable: true,
      get() {
        throw new Error('no name today');
      },
    });
    const { file, importModule } = await pipelineWith(
      {
        'tools/sync.mjs': {
          default: { ...wordCount, name: 'upper', run: ({ text }: { text: string }) => text.toUpperCase() },
        },
        'tools/hostile.mjs': { hostile },
      },
      { tools: ['upper'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues.map((i) => i.message)).toEqual([
      './tools/hostile.mjs: export hostile is not a usable tool: reading it threw: no name today',
    ]);
    const fine = await pipelineWith(
      {
        'tools/sync.mjs': {
          default: { ...wordCount, name: 'upper', run: ({ text }: { text: string }) => text.toUpperCase() },
        },
      },
      { tools: ['upper'] },
    );
    const [upper] = (await loadPipeline(fine.file, { toolNames, importModule: fine.importModule })).tools;
    const running = upper?.run({ text: 'hi' }, {} as never);
    expect(running).toBeInstanceOf(Promise);
    expect(await running).toBe('HI');
  });

  it('takes a tool exported both as default and by name once', async () => {
    const { file, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: wordCount, wordCount } },
      { tools: ['word_count'] },
    );
    expect((await loadPipeline(file, { toolNames, importModule })).tools.map((t) => t.name)).toEqual([
      'word_count',
    ]);
  });

  it('reads a module compiled to CommonJS, whose exports arrive as its default export', async () => {
    const commonJs = Object.defineProperty({ default: wordCount, shout }, '__esModule', { value: true });
    const { file, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: commonJs, shout } },
      { tools: ['word_count', 'shout'] },
    );
    const loaded = await loadPipeline(file, { toolNames, importModule });
    expect(loaded.tools.map((t) => t.name).sort()).toEqual(['shout', 'word_count']);
  });

  it("still refuses a tool name no module exports, listing the modules' tools among those available", async () => {
    const { file, text, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: wordCount } },
      { tools: ['word_cont'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'agents.writer.tools[0]',
        line: lineOf(text, 'tools: [word_cont]'),
        message: expect.stringMatching(
          /^unknown tool "word_cont" \(did you mean "word_count"\?\); available: .*word_count$/,
        ),
      }),
    ]);
  });

  it('refuses a module that is not there, with the path as written and as resolved, at its line', async () => {
    const { file, dir, text, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: wordCount } },
      { moduleList: ['./tools/count.ts', './tools/missing.ts'], tools: ['word_count'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues).toEqual([
      {
        path: 'tools.modules[1]',
        line: lineOf(text, 'missing.ts'),
        column: 7,
        code: 'tool_module_not_found',
        message: `./tools/missing.ts: no such file (looked for ${join(dir, 'tools', 'missing.ts')})`,
      },
    ]);
    expect(error.message).toContain(
      `${file}:${lineOf(text, 'missing.ts')}:7 tools.modules[1]: ./tools/missing.ts`,
    );
  });

  it("refuses a module that does not parse, with the loader's file and line, and names none of its tools as unknown", async () => {
    // How esbuild (under tsx) reports a TypeScript file that does not parse.
    const compile = Object.assign(new Error('Transform failed with 1 error'), {
      errors: [{ text: 'Expected "}" but found "description"', location: { file: 'x', line: 3, column: 2 } }],
    });
    const { file, importModule } = await pipelineWith(
      { 'tools/count.ts': compile },
      { tools: ['word_count'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'tools.modules[0]',
        code: 'tool_module_failed',
        message:
          './tools/count.ts: does not parse: ./tools/count.ts:3:3: Expected "}" but found "description"',
      }),
    ]);
  });

  it('refuses a module whose code throws as it loads, at the line in it that threw', async () => {
    const thrown = new Error('DATABASE_URL is not set');
    const { file, dir, importModule } = await pipelineWith(
      { 'tools/count.ts': thrown },
      { tools: ['word_count'] },
    );
    // Where Node's stack says it threw (tsx maps it back to the TypeScript source).
    thrown.stack = `Error: DATABASE_URL is not set\n    at <anonymous> (${join(dir, 'tools', 'count.ts')}:4:9)\n    at ModuleJob.run (node:internal/modules/esm/module_job:325:25)`;
    const error = await refusal(file, importModule);
    expect(error.issues[0]).toMatchObject({
      code: 'tool_module_failed',
      message:
        './tools/count.ts: threw while loading at ./tools/count.ts:4:9: Error: DATABASE_URL is not set',
    });
  });

  it('refuses a module that imports a package it cannot find, saying to install it', async () => {
    const missing = Object.assign(
      new Error("Cannot find package 'left-pad' imported from /x/tools/count.ts"),
      {
        code: 'ERR_MODULE_NOT_FOUND',
      },
    );
    const { file, importModule } = await pipelineWith(
      { 'tools/count.ts': missing },
      { tools: ['word_count'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues[0]?.code).toBe('tool_module_failed');
    expect(error.issues[0]?.message).toMatch(
      /^\.\/tools\/count\.ts: cannot load what it imports: Cannot find package 'left-pad' .*; install the packages it imports/,
    );
  });

  it('refuses a module that never finishes loading (a top-level await that never settles), in time', async () => {
    const { file } = await pipelineWith({ 'tools/count.ts': {} }, { tools: ['word_count'] });
    let importing = false;
    // A module awaiting a server that never answers: its import never settles.
    const importModule: ImportModule = () => {
      importing = true;
      return new Promise(() => {});
    };
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const refused = refusal(file, importModule);
      await vi.waitFor(() => expect(importing).toBe(true), { timeout: 5_000, interval: 10 });
      await vi.advanceTimersByTimeAsync(30_000);
      const error = await refused;
      expect(error.issues).toEqual([
        expect.objectContaining({
          path: 'tools.modules[0]',
          code: 'tool_module_failed',
          message:
            './tools/count.ts: did not finish loading in 30 s: an await at its top level (or in a module it imports) never settled; connect to what a tool needs when the tool runs, not as the module loads',
        }),
      ]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('says why each bad export is not a tool: which export, and what is wrong with it', async () => {
    const { file, importModule } = await pipelineWith({
      'tools/bad.ts': {
        default: 'word_count',
        dotted: { ...wordCount, name: 'my.tool' },
        stringy: { ...wordCount, input: z.string() },
        plain: { ...wordCount, input: { type: 'object' } },
        zod3: { ...wordCount, input: { _def: { typeName: 'ZodObject' }, parse: () => ({}) } },
        lazy: { ...wordCount, run: 'later' },
        typo: { ...wordCount, timeout: 5_000 },
        // Past what Node's timers hold: it would time out at once.
        forever: { ...wordCount, timeoutMs: 30 * 24 * 3_600_000 },
        mute: { ...wordCount, description: '' },
        dated: { ...wordCount, input: z.object({ when: z.date() }) },
      },
    });
    const error = await refusal(file, importModule);
    const byExport = Object.fromEntries(
      error.issues.map((i) => [/: (export \S+) is not a usable tool/.exec(i.message)?.[1] ?? i.message, i]),
    );
    expect(
      Object.values(byExport).every((i) => i.code === 'invalid_tool_export' && i.path === 'tools.modules[0]'),
    ).toBe(true);
    const why = (name: string) => byExport[`export ${name}`]?.message.split(' is not a usable tool: ')[1];
    expect(why('default')).toBe(
      'it is a string; a tool is an object with name, description, input and run (defineTool makes one)',
    );
    expect(why('dotted')).toBe('name must be 1 to 64 letters, digits, _ or - (it is "my.tool")');
    expect(why('stringy')).toBe(
      'input must be a z.object({ … }), since models send an object (it is z.string())',
    );
    expect(why('plain')).toBe('input must be a zod 4 schema, z.object({ … })');
    expect(why('zod3')).toBe('input is a zod 3 schema; tools need zod 4 (npm install zod@4)');
    expect(why('lazy')).toBe('run must be a function (it is a string)');
    expect(why('typo')).toBe(
      'unknown key "timeout" (did you mean "timeoutMs"?); a tool has name, description, input, run, timeoutMs, rerunnable, readOnly',
    );
    expect(why('forever')).toBe(
      'timeoutMs must be at most 2147483647 (about 24 days; Node ends a longer timer at once) (it is 2592000000)',
    );
    expect(why('mute')).toBe('description must be a text that tells the model what the tool does');
    expect(why('dated')).toMatch(/^tool word_count: its input schema has no JSON Schema form/);
  });

  it('refuses a module that exports no tool, naming what it does export', async () => {
    const { file, importModule } = await pipelineWith({
      'tools/helpers.ts': { slugify: () => '', LIMIT: 3 },
    });
    const error = await refusal(file, importModule);
    expect(error.issues).toEqual([
      expect.objectContaining({
        code: 'tool_module_empty',
        message:
          './tools/helpers.ts exports no tool: export one (or an array of them) as its default export, or as named exports; it exports slugify, LIMIT',
      }),
    ]);
  });

  it("refuses a tool named as a built-in one, or as another module's tool, naming both files", async () => {
    const { file, importModule } = await pipelineWith({
      'tools/files.ts': { default: { ...wordCount, name: 'read_file' } },
      'tools/count.ts': { default: wordCount },
      'tools/again.ts': { count: { ...wordCount } },
    });
    const error = await refusal(file, importModule);
    expect(error.issues.map((i) => [i.path, i.code, i.message])).toEqual([
      [
        'tools.modules[0]',
        'tool_name_taken',
        'tool "read_file" (export default of ./tools/files.ts) has the name of a built-in tool; give it another name',
      ],
      [
        'tools.modules[2]',
        'tool_name_taken',
        'tool "word_count" (export count of ./tools/again.ts) has the name of export default of ./tools/count.ts; tool names must be unique',
      ],
    ]);
  });

  it('refuses a module named twice', async () => {
    const { file, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: wordCount } },
      { moduleList: ['./tools/count.ts', './tools/../tools/count.ts'], tools: ['word_count'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'tools.modules[1]',
        code: 'tool_module_repeated',
        message: './tools/../tools/count.ts is named twice (also tools.modules[0]); name each module once',
      }),
    ]);
  });

  it('refuses a module path that is not relative or not a module file, by the schema', async () => {
    const { file, text, importModule } = await pipelineWith(
      { 'tools/count.ts': { default: wordCount } },
      { moduleList: ['tools/count.ts', './tools/count.py'] },
    );
    const error = await refusal(file, importModule);
    expect(error.issues.map((i) => [i.path, i.line, i.message])).toEqual([
      [
        'tools.modules[0]',
        lineOf(text, '- tools/count.ts'),
        'a tool module is a path starting with ./ or ../ (relative to this file), or /',
      ],
      ['tools.modules[1]', lineOf(text, 'count.py'), 'a tool module is a .ts, .mts, .js or .mjs file'],
    ]);
  });
});
