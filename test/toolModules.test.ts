import { cp, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { repoRoot } from './support/harness.ts';

/**
 * A user's project, as the stock CLI meets it: a pipeline file naming a TypeScript tool module, which imports
 * `@troupe/runtime` and `zod` from the project's own node_modules (a copy of zod, and the runtime's source, so
 * neither is what the CLI's bundle holds).
 */
const TOOL = `import { readFile } from 'node:fs/promises';
import { defineTool, resolveInWorkspace, ToolError } from '@troupe/runtime';
import { z } from 'zod';

interface Counted { words: number; lines: number }

function count(text: string): Counted {
  return { words: text.split(/\\s+/).filter(Boolean).length, lines: text.split('\\n').filter(Boolean).length };
}

export default defineTool({
  name: 'word_count',
  description: 'Count the words of a file in the workspace',
  input: z.object({ path: z.string().min(1).describe('File path relative to the workspace') }),
  async run({ path }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, path, { tool: 'word_count', mustExist: true });
    const text = await readFile(file, 'utf8');
    if (text.trim() === '') throw new ToolError('invalid_arguments', 'word_count: ' + path + ' is empty');
    const { words, lines } = count(text);
    return path + ': ' + words + ' words on ' + lines + ' lines (counted by the module)';
  },
});
`;

const SCRIPT = `agents:
  writer:
    - toolCalls:
        - name: write_file
          arguments: { path: notes/note.md, content: "one two three\\nfour five\\n" }
    - toolCalls:
        - name: word_count
          arguments: { path: notes/note.md }
        - name: word_count
          arguments: { path: notes/missing.md }
    - content: Counted the note.
`;

const pipelineText = (name: string, modules: string | undefined, tools: string) => `version: 1
name: ${name}
models: { scripted: { provider: scripted, script: ./script.yaml } }
defaults: { model: scripted }
${modules === undefined ? '' : `tools:\n  modules: [${modules}]\n`}agents:
  writer:
    instructions: Write and count.
    tools: [${tools}]
    permissions:
      - { tool: write_file, decision: allow, paths: ["notes/**"] }
flow:
  - { id: write, kind: agent, agent: writer }
`;

let project: string;
let nats: TestNats;
const running: CliProcess[] = [];

beforeAll(async () => {
  project = await mkdtemp(join(tmpdir(), 'troupe-tool-modules-'));
  await writeFile(join(project, 'package.json'), '{ "type": "module" }\n');
  await mkdir(join(project, 'node_modules', '@troupe'), { recursive: true });
  await cp(join(repoRoot, 'node_modules', 'zod'), join(project, 'node_modules', 'zod'), { recursive: true });
  await symlink(join(repoRoot, 'packages', 'runtime'), join(project, 'node_modules', '@troupe', 'runtime'));
  await mkdir(join(project, 'tools'));
  await writeFile(join(project, 'tools', 'wordCount.ts'), TOOL);
  await writeFile(
    join(project, 'tools', 'broken.ts'),
    "const n: number = 1;\nexport default { name: 'broken'\n  description: 'x' };\n",
  );
  await writeFile(
    join(project, 'tools', 'broken.mjs'),
    "export default { name: 'broken'\n  description: 'x' };\n",
  );
  await writeFile(
    join(project, 'tools', 'throws.ts'),
    "const key: string | undefined = process.env.NO_SUCH_KEY;\nif (!key) throw new Error('NO_SUCH_KEY is not set');\nexport default {};\n",
  );
  await writeFile(join(project, 'script.yaml'), SCRIPT);
  nats = await startTestNats();
});

afterAll(async () => {
  await Promise.all(running.map((p) => p.stop()));
  await nats?.stop();
  await rm(project, { recursive: true, force: true });
});

async function pipelineFile(file: string, name: string, modules: string | undefined, tools: string) {
  const path = join(project, file);
  await writeFile(path, pipelineText(name, modules, tools));
  return path;
}

function start(args: string[]): CliProcess {
  const child = startTroupe(args, cliEnv({ NATS_URL: nats.url }), project);
  running.push(child);
  return child;
}

interface ToolResultLine {
  kind: string;
  data: { tool: string; ok: boolean; output: string; error?: { code: string } };
}

/** Submits a task with `troupe submit --wait --json` and gives its exit code and its tool results. */
async function submit(pipeline: string) {
  const result = await troupe(
    ['submit', pipeline, 'write a note and count it', '--wait', '--json'],
    cliEnv({ NATS_URL: nats.url }),
    60_000,
    project,
  );
  const lines = result.stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as ToolResultLine);
  const results = lines
    .filter((l) => l.kind === 'tool.result' && l.data.tool === 'word_count')
    .map((l) => l.data);
  return { ...result, lines, results };
}

describe('a tool module named by a pipeline file, in the stock CLI', () => {
  it('troupe validate loads it and lists its tools', async () => {
    const file = await pipelineFile(
      'counted.yaml',
      'counted',
      './tools/wordCount.ts',
      'write_file, word_count',
    );
    const result = await troupe(['validate', file], cliEnv(), 60_000, project);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('pipeline counted — 1 agent; own tools: word_count; flow: write');
  });

  it('loads it from a project whose package.json says commonjs, as `npm init` writes it, or says nothing', async () => {
    for (const [dir, manifest] of [
      ['made-by-npm-init', '{ "name": "mine", "version": "1.0.0", "type": "commonjs" }\n'],
      ['no-type', '{ "name": "mine", "version": "1.0.0" }\n'],
    ] as const) {
      await mkdir(join(project, dir, 'tools'), { recursive: true });
      await writeFile(join(project, dir, 'package.json'), manifest);
      await writeFile(join(project, dir, 'tools', 'wordCount.ts'), TOOL);
      await writeFile(join(project, dir, 'script.yaml'), SCRIPT);
      const file = join(project, dir, 'counted.yaml');
      await writeFile(file, pipelineText('counted', './tools/wordCount.ts', 'write_file, word_count'));
      const result = await troupe(['validate', file], cliEnv(), 60_000, project);
      expect(result.stderr, dir).toBe('');
      expect(result.stdout, dir).toContain('own tools: word_count');
    }
  });

  it('troupe up runs it where a scripted model calls it, and its result and its ToolError reach the task', async () => {
    const file = await pipelineFile(
      'counted.yaml',
      'counted',
      './tools/wordCount.ts',
      'write_file, word_count',
    );
    const up = start(['up', file, '--home', join(project, 'home-up')]);
    await up.waitFor(/troupe is up on/, 60_000);
    const task = await submit('counted');
    expect(task.code, task.stderr).toBe(0);
    expect(task.results).toEqual([
      expect.objectContaining({
        ok: true,
        output: 'notes/note.md: 5 words on 2 lines (counted by the module)',
      }),
      // Thrown by the module's own copy of @troupe/runtime, yet known by its code.
      expect.objectContaining({ ok: false, error: expect.objectContaining({ code: 'not_found' }) }),
    ]);
    expect(task.lines.some((l) => l.kind === 'task.completed')).toBe(true);
    expect(await up.stop()).toBe(0);

    // Replayed offline against the file, the module's tool runs again and gives what it gave.
    const taskId = (task.lines[0] as unknown as { taskId: string }).taskId;
    const replay = await troupe(
      ['replay', taskId, '--pipeline', file],
      cliEnv({ NATS_URL: nats.url }),
      60_000,
      project,
    );
    expect(replay.stderr).toBe('');
    expect(replay.stdout).toMatch(
      new RegExp(`^replayed task ${taskId} against .*: the same \\d+ facts as recorded\n$`),
    );
    expect(replay.code).toBe(0);
  });

  it('troupe worker loads it on the agents’ host, while the coordinator hosts none', async () => {
    const file = await pipelineFile(
      'spread.yaml',
      'spread',
      './tools/wordCount.ts',
      'write_file, word_count',
    );
    const up = start(['up', file, '--no-agents', '--home', join(project, 'home-spread')]);
    await up.waitFor(/troupe is up on/, 60_000);
    const worker = start(['worker', file, '--home', join(project, 'home-worker')]);
    await worker.waitFor(/troupe worker on .* serving spread: writer/, 60_000);
    const task = await submit('spread');
    expect(task.code, task.stderr).toBe(0);
    expect(task.results[0]).toMatchObject({
      ok: true,
      output: expect.stringContaining('(counted by the module)'),
    });
    // The coordinator hosts no agent: the workspace the tool counted in is the worker's.
    expect(await readdir(join(project, 'home-worker', 'workspaces', 'spread'))).toHaveLength(1);
    expect(await worker.stop()).toBe(0);
    expect(await up.stop()).toBe(0);
  });

  it('a step whose version declares a tool the worker that gets it lacks fails at once, saying so', async () => {
    const file = await pipelineFile(
      'lacking.yaml',
      'lacking',
      './tools/wordCount.ts',
      'write_file, word_count',
    );
    // The worker's own file of the same pipeline names no module: its registry has no word_count.
    const workerFile = await pipelineFile('lacking-worker.yaml', 'lacking', undefined, 'write_file');
    const up = start(['up', file, '--no-agents', '--home', join(project, 'home-lacking')]);
    await up.waitFor(/troupe is up on/, 60_000);
    const worker = start(['worker', workerFile, '--home', join(project, 'home-lacking-worker')]);
    await worker.waitFor(/troupe worker on .* serving lacking: writer/, 60_000);
    const started = performance.now();
    const task = await submit('lacking');
    expect(task.code).toBe(1);
    expect(`${task.stdout}\n${task.stderr}`).toContain(
      'its agents declare tools this host does not have (writer: word_count); start this host with a pipeline file whose tools.modules provide them',
    );
    // Not a wait for a step timeout (600 s by default) or heartbeats: it fails when the worker gets it.
    expect(performance.now() - started).toBeLessThan(30_000);
    await worker.stop();
    await up.stop();
  });

  it('troupe validate names the line of a JavaScript module that does not parse, and of the code that threw', async () => {
    const broken = await pipelineFile('brokenjs.yaml', 'brokenjs', './tools/broken.mjs', 'write_file');
    const threw = await pipelineFile('threw.yaml', 'threw', './tools/throws.ts', 'write_file');
    const result = await troupe(['validate', broken, threw], cliEnv(), 60_000, project);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `${broken}:6:13 tools.modules[0]: ./tools/broken.mjs: does not parse: ./tools/broken.mjs:2:3: Unexpected identifier 'description'`,
    );
    expect(result.stderr).toContain(
      `${threw}:6:13 tools.modules[0]: ./tools/throws.ts: threw while loading at ./tools/throws.ts:2:17: Error: NO_SUCH_KEY is not set`,
    );
  });

  it('troupe up, troupe worker and troupe validate refuse a module that does not parse, before anything starts', async () => {
    const file = await pipelineFile('broken.yaml', 'broken', './tools/broken.ts', 'write_file');
    const line = `${file}:6:13 tools.modules[0]: ./tools/broken.ts: does not parse: ./tools/broken.ts:3:3: Expected "}" but found "description"`;

    const validate = await troupe(['validate', file], cliEnv(), 60_000, project);
    expect(validate.code).toBe(1);
    expect(validate.stderr).toBe(`✗ ${file} is not a valid pipeline:\n  ${line}\n`);

    // No NATS_URL: it would start an embedded nats-server in its home, but stops before.
    const home = join(project, 'home-broken');
    const up = await troupe(['up', file, '--home', home], cliEnv(), 60_000, project);
    expect(up.code).toBe(2);
    expect(up.stderr).toContain(line);
    expect(await readdir(home).catch(() => [])).toEqual([]);

    const worker = await troupe(['worker', file], cliEnv({ NATS_URL: nats.url }), 60_000, project);
    expect(worker.code).toBe(2);
    expect(worker.stderr).toContain(line);
  });
});
