import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools, ConfigError, loadPipeline } from '@troupe/coordinator';
import { ToolExecutor, ToolRegistry } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { importToolModule } from '../src/toolModuleImport.ts';

const repo = join(import.meta.dirname, '..', '..', '..');
const toolNames = builtinTools().names();

/**
 * A project of a user's own: its package.json, its own copy of zod (not the copy this test, standing for the CLI,
 * uses) and its @troupe/runtime in node_modules, and tool modules in TypeScript and JavaScript.
 */
let project: string;
const modules: Record<string, string> = {
  'tools/wordCount.ts': `import { readFile } from 'node:fs/promises';
import { defineTool, resolveInWorkspace, ToolError } from '@troupe/runtime';
import { z } from 'zod';

interface Counted { words: number }
const count = (text: string): Counted => ({ words: text.split(/\\s+/).filter(Boolean).length });

export const wordCount = defineTool({
  name: 'word_count',
  description: 'Count the words of a file',
  input: z.object({ path: z.string().min(1).describe('File path relative to the workspace') }),
  async run({ path }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, path, { tool: 'word_count', mustExist: true });
    const text = await readFile(file, 'utf8');
    if (text === '') throw new ToolError('invalid_arguments', 'word_count: ' + path + ' is empty');
    return count(text).words + ' words';
  },
});
`,
  // No @troupe import at all: a plain object is a tool.
  'tools/shout.mjs': `import { z } from 'zod';
export default [{
  name: 'shout',
  description: 'Upper-case a text',
  input: z.object({ text: z.string().describe('What to shout') }),
  run: async ({ text }) => text.toUpperCase(),
}];
`,
  'tools/needsPackage.ts': `import pad from 'left-pad-that-is-not-installed';
export default pad;
`,
};

beforeAll(async () => {
  project = await mkdtemp(join(tmpdir(), 'troupe-own-tools-'));
  await writeFile(join(project, 'package.json'), '{ "type": "module" }\n');
  await mkdir(join(project, 'node_modules', '@troupe'), { recursive: true });
  await cp(join(repo, 'node_modules', 'zod'), join(project, 'node_modules', 'zod'), { recursive: true });
  await symlink(join(repo, 'packages', 'runtime'), join(project, 'node_modules', '@troupe', 'runtime'));
  await mkdir(join(project, 'tools'));
  for (const [path, text] of Object.entries(modules)) await writeFile(join(project, path), text);
  await writeFile(join(project, 'script.yaml'), 'agents:\n  writer:\n    - content: done\n');
});

afterAll(async () => {
  await rm(project, { recursive: true, force: true });
});

async function pipeline(moduleList: string[], tools: string[]): Promise<string> {
  const file = join(project, `pipeline-${moduleList.join('-').replace(/[^a-zA-Z-]/g, '')}.yaml`);
  await writeFile(
    file,
    `version: 1
name: own-tools
models: { scripted: { provider: scripted, script: ./script.yaml } }
defaults: { model: scripted }
tools:
  modules: [${moduleList.join(', ')}]
agents:
  writer: { instructions: Write., tools: [${tools.join(', ')}] }
flow: [{ id: write, kind: agent, agent: writer }]
`,
  );
  return file;
}

async function refusal(file: string): Promise<ConfigError> {
  const error = await loadPipeline(file, { toolNames, importModule: importToolModule }).catch(
    (e: unknown) => e,
  );
  if (!(error instanceof ConfigError)) throw new Error(`expected a ConfigError, got ${String(error)}`);
  return error;
}

describe('the CLI loading tool modules', () => {
  it('loads TypeScript and JavaScript modules whose zod is a copy of their own', async () => {
    const file = await pipeline(['./tools/wordCount.ts', './tools/shout.mjs'], ['word_count', 'shout']);
    const { tools } = await loadPipeline(file, { toolNames, importModule: importToolModule });
    expect(tools.map((t) => t.name)).toEqual(['word_count', 'shout']);
    // The test is worth something only if the schemas are another zod's.
    for (const tool of tools) expect(Object.getPrototypeOf(tool.input)).not.toBe(z.ZodObject.prototype);
    const registry = new ToolRegistry();
    for (const tool of tools) registry.register(tool);
    expect(registry.definitions(['word_count', 'shout']).map((d) => d.parameters)).toEqual([
      expect.objectContaining({
        properties: {
          path: { type: 'string', minLength: 1, description: 'File path relative to the workspace' },
        },
        required: ['path'],
      }),
      expect.objectContaining({ properties: { text: { type: 'string', description: 'What to shout' } } }),
    ]);

    const workspace = await mkdtemp(join(tmpdir(), 'troupe-own-tools-ws-'));
    await writeFile(join(workspace, 'note.md'), 'three little words');
    await writeFile(join(workspace, 'empty.md'), '');
    const executor = new ToolExecutor({
      registry,
      policy: { tools: ['word_count', 'shout'], rules: [] },
      agent: 'writer',
      workspace,
      taskId: 't-1',
    });
    const call = (name: string, args: unknown) => ({
      id: `c-${name}`,
      name,
      arguments: JSON.stringify(args),
    });
    const results = await executor.executeAll([
      call('word_count', { path: 'note.md' }),
      call('word_count', { path: '' }),
      call('word_count', { path: 'missing.md' }),
      call('word_count', { path: 'empty.md' }),
      call('shout', { text: 'hi' }),
    ]);
    await rm(workspace, { recursive: true, force: true });
    expect(results.map((r) => (r.ok ? r.output : r.error?.code))).toEqual([
      '3 words',
      // Their zod validates the arguments.
      'invalid_arguments',
      'not_found',
      'invalid_arguments',
      'HI',
    ]);
  });

  // Under vitest, Vite loads the modules (TypeScript too) and rewrites stacks: how tsx and Node report a module that
  // does not parse or throws, and a ToolError of another copy of the runtime, are tested through the built CLI in
  // test/toolModules.test.ts.
  it('refuses a module that imports a package not installed', async () => {
    const error = await refusal(await pipeline(['./tools/needsPackage.ts'], []));
    expect(error.issues[0]?.code).toBe('tool_module_failed');
    expect(error.issues[0]?.message).toContain(
      "./tools/needsPackage.ts: cannot load what it imports: Cannot find package 'left-pad-that-is-not-installed'",
    );
  });

  it('the example tool module is one', async () => {
    const example = join(repo, 'examples', 'wordcount.yaml');
    expect((await readFile(example, 'utf8')).includes('./tools/wordCount.ts')).toBe(true);
    const { tools } = await loadPipeline(example, { toolNames, importModule: importToolModule });
    expect(tools.map((t) => t.name)).toEqual(['word_count']);
  });
});
