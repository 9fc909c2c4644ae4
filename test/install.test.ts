import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { repoRoot } from './support/harness.ts';

// Troupe as a user gets it: `npm run pack`'s tarballs installed into an empty directory, from the npm registry
// (the default npm cache makes a rerun fast), with nothing reachable of this repository's node_modules.

const run = promisify(execFile);
const manifest = (dir: string) =>
  readFile(join(repoRoot, dir, 'package.json'), 'utf8').then((text) => JSON.parse(text));
const LIBRARIES = ['protocol', 'llm', 'runtime', 'client', 'coordinator'];

let tmp: string;
let prefix: string;
let env: NodeJS.ProcessEnv;
let version: string;
const tarball = (name: string) => join(tmp, 'pack', `troupe-${name}-${version}.tgz`);

/**
 * This process's environment without what would lead a child back into the repository: npm run's
 * node_modules/.bin on PATH, NODE_PATH and NODE_OPTIONS, npm's settings for this project, how to reach a NATS.
 */
function isolatedEnv(): NodeJS.ProcessEnv {
  const kept = Object.entries(process.env).filter(
    ([key]) =>
      !/^(npm_|NATS_|TROUPE_|NODE_PATH$|NODE_OPTIONS$|INIT_CWD$)/.test(key) ||
      /^npm_config_(cache|registry|userconfig|cafile|strict_ssl|https?_proxy|proxy|noproxy)$/i.test(key),
  );
  const path = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => dir !== '' && !dir.startsWith(repoRoot));
  return {
    ...Object.fromEntries(kept),
    PATH: [join(prefix, 'bin'), ...path].join(delimiter),
    NODE_PATH: '',
    TROUPE_LOG_LEVEL: 'warn',
  };
}

function sh(command: string, args: string[], cwd: string, extra: NodeJS.ProcessEnv = {}) {
  return run(command, args, { cwd, env: { ...env, ...extra }, maxBuffer: 64 * 1024 * 1024 });
}

/** Runs a command to its end, whatever its exit code. */
async function result(command: string, args: string[], cwd: string, extra: NodeJS.ProcessEnv = {}) {
  try {
    const { stdout, stderr } = await sh(command, args, cwd, extra);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

const npmInstall = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

beforeAll(async () => {
  tmp = await realpath(await mkdtemp(join(tmpdir(), 'troupe-install-')));
  prefix = join(tmp, 'prefix');
  env = isolatedEnv();
  version = (await manifest('apps/cli')).version;
  // The e2e global setup has just built the CLI bundle and the dashboard, which `npm run pack` would build first.
  await run(process.execPath, [join(repoRoot, 'scripts', 'pack.mjs'), '--out', join(tmp, 'pack')], {
    cwd: repoRoot,
  });

  const app = join(tmp, 'app');
  await mkdir(app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  const pins = (await manifest('packages/protocol')).dependencies;
  const typesNode = (await manifest('.')).devDependencies['@types/node'];
  await Promise.all([
    sh('npm', ['install', '-g', '--prefix', prefix, ...npmInstall, tarball('cli')], tmp),
    sh(
      'npm',
      ['install', ...npmInstall, ...LIBRARIES.map(tarball), `zod@${pins.zod}`, `@types/node@${typesNode}`],
      app,
    ),
  ]);
}, 300_000);

afterAll(async () => {
  if (tmp !== undefined) await rm(tmp, { recursive: true, force: true });
});

describe('the packed tarballs, installed', () => {
  it('give a troupe on PATH that inits, runs and finishes a task from an empty directory', async () => {
    const { stdout: which } = await sh('sh', ['-c', 'command -v troupe'], tmp);
    expect(which.trim()).toBe(join(prefix, 'bin', 'troupe'));
    const installed = join(prefix, 'lib', 'node_modules', '@troupe', 'cli');
    expect(await realpath(which.trim())).toBe(join(installed, 'bin', 'troupe.mjs'));
    // Each installed package carries the licence text with it.
    for (const dir of [
      installed,
      ...['protocol', 'runtime', 'client'].map((name) => join(tmp, 'app', 'node_modules', '@troupe', name)),
    ])
      expect(await readFile(join(dir, 'LICENSE'), 'utf8')).toContain('Apache License');
    // The CLI's npm packages come from its own install, never from the repository.
    const { stdout: commander } = await sh(
      process.execPath,
      ['-p', `require.resolve('commander', { paths: [${JSON.stringify(installed)}] })`],
      tmp,
    );
    expect(commander.startsWith(installed)).toBe(true);

    const work = join(tmp, 'work');
    await mkdir(work);
    expect((await sh('troupe', ['--version'], work)).stdout.trim()).toBe(version);
    const init = await sh('troupe', ['init'], work);
    expect(init.stdout).toContain('(pipeline work)');
    expect(init.stdout).toContain('run it:          troupe up pipeline.yaml');

    const port = await freePort();
    const up = startUp(work, ['--gateway', `127.0.0.1:${port}`, '--gateway-no-auth']);
    try {
      await vi.waitFor(
        () => expect(up.output()).toMatch(/troupe is up on nats:\/\/127\.0\.0\.1:\d+ \(embedded/),
        {
          timeout: 30_000,
          interval: 50,
        },
      );
      const submitted = await result(
        'troupe',
        ['submit', 'work', 'Write a haiku about NATS', '--wait'],
        work,
      );
      expect(submitted.code, submitted.stderr).toBe(0);
      expect(submitted.stdout).toMatch(/task\.completed/);
      // The dashboard travels in the CLI's tarball, and the gateway finds it there.
      expect(up.output()).toMatch(new RegExp(`gateway: +http://127\\.0\\.0\\.1:${port}`));
      const dashboard = await fetch(`http://127.0.0.1:${port}/`);
      expect(dashboard.status).toBe(200);
      expect(await dashboard.text()).toMatch(/^<!doctype html>/i);

      // A user's own program, on the installed libraries, submits to the same service and gets the result.
      const app = join(tmp, 'app');
      await writeFile(join(app, 'app.ts'), CONSUMER);
      await writeFile(join(app, 'tsconfig.json'), JSON.stringify(consumerConfig('Node16', 'Node16')));
      await sh(
        process.execPath,
        [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'],
        app,
      );
      const record = JSON.parse(await readFile(join(work, '.troupe', 'server.json'), 'utf8'));
      const { stdout } = await sh(
        process.execPath,
        ['out/app.js', join(work, 'pipeline.yaml'), record.url],
        app,
      );
      expect(JSON.parse(stdout)).toEqual({
        pipeline: 'work',
        tools: true,
        status: 'completed',
        bus: 'function',
        redacted: 'x',
      });
      for (const name of ['@troupe/client', '@troupe/runtime', '@troupe/coordinator', 'zod']) {
        const { stdout: resolved } = await sh(process.execPath, ['-p', `require.resolve('${name}')`], app);
        expect(resolved.startsWith(join(app, 'node_modules')), `${name}: ${resolved}`).toBe(true);
      }
    } finally {
      expect(await up.stop()).toBe(0);
    }
  }, 180_000);

  it("type the libraries for a consumer's node16 and bundler resolution", async () => {
    const app = join(tmp, 'app');
    await writeFile(join(app, 'typed.ts'), CONSUMER);
    const tsc = join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc');
    await writeFile(
      join(app, 'tsconfig.bundler.json'),
      JSON.stringify(consumerConfig('Preserve', 'Bundler')),
    );
    const bundler = await result(process.execPath, [tsc, '-p', 'tsconfig.bundler.json'], app);
    expect(bundler.stdout + bundler.stderr).toBe('');
    expect(bundler.code).toBe(0);
    // The types are real: a wrong use of them is an error.
    await writeFile(
      join(app, 'typed.ts'),
      CONSUMER.replace("const status: 'completed' | 'failed' | 'cancelled' =", 'const status: number ='),
    );
    const wrong = await result(process.execPath, [tsc, '-p', 'tsconfig.bundler.json'], app);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stdout).toContain("is not assignable to type 'number'");
  }, 180_000);

  it("run a TypeScript tool module of the user's own, on the installed @troupe/runtime and zod, under troupe up", async () => {
    // Beside the app's node_modules: the module imports the app's @troupe/runtime and zod, not the CLI's copies.
    const own = join(tmp, 'app', 'own-tools');
    await mkdir(join(own, 'tools'), { recursive: true });
    await writeFile(join(own, 'tools', 'wordCount.ts'), OWN_TOOL);
    await writeFile(join(own, 'pipeline.yaml'), OWN_PIPELINE);
    await writeFile(join(own, 'pipeline.script.yaml'), OWN_SCRIPT);
    const validated = await result('troupe', ['validate', 'pipeline.yaml'], own);
    expect(validated.stderr).toBe('');
    expect(validated.stdout).toContain('own tools: word_count');
    const up = startUp(own);
    try {
      await vi.waitFor(() => expect(up.output()).toMatch(/troupe is up on/), {
        timeout: 30_000,
        interval: 50,
      });
      const submitted = await result(
        'troupe',
        ['submit', 'counted', 'Count a note', '--wait', '--json'],
        own,
      );
      expect(submitted.code, submitted.stderr).toBe(0);
      const results = submitted.stdout
        .split('\n')
        .filter((line) => line.includes('"kind":"tool.result"'))
        .map((line) => JSON.parse(line).data)
        .filter((data) => data.tool === 'word_count');
      expect(results.map((r) => (r.ok ? r.output : r.error.code))).toEqual([
        'notes/note.md: 5 words',
        // A ToolError of the app's own @troupe/runtime keeps its code in the CLI's bundled one.
        'not_found',
      ]);
    } finally {
      expect(await up.stop()).toBe(0);
    }
  });

  it('say how to get a nats-server when troupe up finds none', async () => {
    const work = join(tmp, 'no-nats');
    await mkdir(work);
    await sh('troupe', ['init'], work);
    const up = await result('troupe', ['up', 'pipeline.yaml'], work, {
      NATS_SERVER_BIN: join(tmp, 'nats-server'),
    });
    expect(up.code).toBe(1);
    for (const way of [
      'sudo apt-get install nats-server',
      'brew install nats-server',
      'https://github.com/nats-io/nats-server/releases',
      'set NATS_SERVER_BIN to its path',
      'set NATS_URL to use a running server',
    ]) {
      expect(up.stderr).toContain(way);
    }
  });
});

/** `troupe up` in the background, its output collected; stopped by its own pid. */
function startUp(cwd: string, args: string[] = []) {
  const child: ChildProcess = spawn('troupe', ['up', 'pipeline.yaml', ...args], {
    cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk) => (output += chunk));
  child.stderr?.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  return {
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGTERM');
      return exited;
    },
  };
}

/** A port nothing listens on at this moment, chosen by the OS. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

function consumerConfig(module: string, moduleResolution: string) {
  return {
    compilerOptions: {
      target: 'ES2022',
      module,
      moduleResolution,
      strict: true,
      // Under node16, Troupe's own .d.ts (and what they import) are checked too, not only this program against
      // them; once is enough, and it is the slow part.
      skipLibCheck: moduleResolution !== 'Node16',
      types: ['node'],
      outDir: 'out',
      ...(moduleResolution === 'Bundler' ? { noEmit: true } : {}),
    },
    files: [moduleResolution === 'Bundler' ? 'typed.ts' : 'app.ts'],
  };
}

/** A program of a user's own: a tool for the coordinator's start-up API, and a client that submits a task. */
const CONSUMER = `import { readFile } from 'node:fs/promises';
import { TroupeClient } from '@troupe/client';
import { builtinTools, loadPipeline } from '@troupe/coordinator';
import { defineTool, resolveInWorkspace, ToolError } from '@troupe/runtime';
import { NatsBus } from '@troupe/runtime/bus';
import { redactSecrets } from '@troupe/runtime/secrets';
import { z } from 'zod';

const wordCount = defineTool({
  name: 'word_count',
  description: 'Count the words in a text file of the workspace',
  input: z.object({ path: z.string().min(1) }),
  async run({ path }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, path, { tool: 'word_count', mustExist: true });
    const text = await readFile(file, 'utf8');
    if (text.length === 0) throw new ToolError('invalid_arguments', \`word_count: \${path} is empty\`);
    return \`\${text.split(/\\s+/).filter(Boolean).length} words in \${path}\`;
  },
});
const [pipelineFile = '', servers = ''] = process.argv.slice(2);
const registry = builtinTools().register(wordCount);
const pipeline = await loadPipeline(pipelineFile, { toolNames: registry.names() });
const client = await TroupeClient.connect({ servers });
const { taskId } = await client.submit(pipeline.config.name, { goal: 'Write a haiku from a program' });
const result = await client.wait(taskId, { timeoutMs: 30_000 });
await client.close();
const status: 'completed' | 'failed' | 'cancelled' = result.status;
console.log(
  JSON.stringify({
    pipeline: pipeline.config.name,
    tools: registry.names().includes('word_count'),
    status,
    bus: typeof NatsBus.connect,
    redacted: redactSecrets('x'),
  }),
);
`;

/** A tool module as a user writes one, with the pipeline that names it and a script whose model calls it. */
const OWN_TOOL = `import { readFile } from 'node:fs/promises';
import { defineTool, resolveInWorkspace, ToolError } from '@troupe/runtime';
import { z } from 'zod';

export default defineTool({
  name: 'word_count',
  description: 'Count the words of a file in the workspace',
  input: z.object({ path: z.string().min(1).describe('File path relative to the workspace') }),
  async run({ path }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, path, { tool: 'word_count', mustExist: true });
    const text: string = await readFile(file, 'utf8');
    if (text.trim() === '') throw new ToolError('invalid_arguments', path + ' is empty');
    return path + ': ' + text.split(/\\s+/).filter(Boolean).length + ' words';
  },
});
`;
const OWN_PIPELINE = `version: 1
name: counted
models: { scripted: { provider: scripted, script: ./pipeline.script.yaml } }
defaults: { model: scripted }
tools:
  modules: [./tools/wordCount.ts]
agents:
  writer:
    instructions: Write and count.
    tools: [write_file, word_count]
    permissions: [{ tool: write_file, decision: allow, paths: ["notes/**"] }]
flow: [{ id: write, kind: agent, agent: writer }]
`;
const OWN_SCRIPT = `agents:
  writer:
    - toolCalls: [{ name: write_file, arguments: { path: notes/note.md, content: "one two three four five" } }]
    - toolCalls:
        - { name: word_count, arguments: { path: notes/note.md } }
        - { name: word_count, arguments: { path: notes/missing.md } }
    - content: Counted.
`;
