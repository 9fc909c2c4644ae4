import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath, repoRoot } from './support/harness.ts';

const cliBin = join(repoRoot, 'apps', 'cli', 'bin', 'troupe.mjs');

/**
 * A task's results from the command line: `troupe submit --wait` ends with the task's output and where its files
 * are, and `troupe files` lists and prints them — with no server running too — and says clearly when they are not on
 * this host.
 */
/** 300 KB of JSON: more than a final event holds. */
const BIG_OUTPUT = JSON.stringify({ report: 'r'.repeat(300 * 1024) });

describe('troupe files and what troupe submit --wait prints at the end', () => {
  let home: string;
  let up: CliProcess | undefined;
  const taskId = 'cli-files-1';
  let workspace: string;
  let gatewayUrl: string;

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-cli-files-'));
    // A pipeline whose output is too large for its final event (kept in the object store) and that writes no file.
    await writeFile(
      join(home, 'bigout.yaml'),
      `version: 1
name: bigout
models:
  scripted: { provider: scripted, script: ./bigout.script.yaml }
defaults: { model: scripted }
agents:
  reporter: { instructions: Report. }
flow:
  - { id: report, kind: agent, agent: reporter }
`,
    );
    await writeFile(
      join(home, 'bigout.script.yaml'),
      `agents:\n  reporter:\n    - content: '${BIG_OUTPUT}'\n`,
    );
    // With the gateway beside it, which serves this home's workspaces.
    up = startTroupe([
      'up',
      examplePath('demo.yaml'),
      join(home, 'bigout.yaml'),
      '--home',
      home,
      '--gateway',
      '0',
      '--gateway-no-auth',
    ]);
    await up.waitFor(/gateway: +http:\/\/\S+/, 30_000);
    gatewayUrl = /gateway: +(http:\/\/\S+)/.exec(up.output())?.[1] ?? '';
    workspace = join(home, 'workspaces', 'demo', taskId);
  }, 60_000);
  afterAll(async () => {
    await up?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('submit --wait prints the output, then where the files are and how to list them', async () => {
    const result = await troupe(
      [
        'submit',
        'demo',
        'Write a short hello note in notes/hello.md',
        '--wait',
        '--id',
        taskId,
        '--home',
        home,
      ],
      undefined,
      90_000,
    );
    expect(result.code, result.stderr).toBe(0);
    const tail = result.stdout.slice(result.stdout.lastIndexOf('task.completed'));
    expect(tail).toContain(`output of ${taskId}:`);
    expect(tail).toContain(`files of ${taskId}: 1 file in ${workspace}`);
    expect(tail).toContain(`troupe files ${taskId}`);
  }, 120_000);

  it('submit --wait --json keeps every line JSON: the events, then the result with the output and files', async () => {
    const id = 'cli-files-json';
    const result = await troupe(
      [
        'submit',
        'demo',
        'Write a short hello note in notes/hello.md',
        '--wait',
        '--json',
        '--id',
        id,
        '--home',
        home,
      ],
      undefined,
      90_000,
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trim().split('\n');
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const final = parsed.find((line) => line.kind === 'task.completed') as { data: { output: string } };
    const last = parsed.at(-1);
    expect(last).toEqual({
      taskId: id,
      pipeline: 'demo',
      status: 'completed',
      output: final.data.output,
      files: { here: true, workspace: join(home, 'workspaces', 'demo', id), count: 1 },
    });
    // Asking again for a task that has ended gives the same result, without running it again.
    const again = await troupe(['submit', 'demo', 'again', '--wait', '--json', '--id', id, '--home', home]);
    expect(again.code, again.stderr).toBe(0);
    expect(
      again.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line)),
    ).toEqual([last]);
  }, 120_000);

  it('submit --wait gives an output too large for the event whole, and says a task with no files has none here', async () => {
    const result = await troupe(
      ['submit', 'bigout', 'report', '--wait', '--json', '--id', 'cli-files-big', '--home', home],
      undefined,
      90_000,
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const final = lines.find((line) => line.kind === 'task.completed') as {
      data: { output: string; outputRef?: unknown };
    };
    // The event holds a preview and where the whole is; the result holds the whole.
    expect(final.data.outputRef).toBeDefined();
    expect(final.data.output.length).toBeLessThan(BIG_OUTPUT.length);
    const last = lines.at(-1) as {
      output: string;
      outputPreview?: boolean;
      files: { here: boolean; hint?: string };
    };
    expect(last.output).toBe(BIG_OUTPUT);
    expect(last.outputPreview).toBeUndefined();
    expect(last.files.here).toBe(false);
    expect(last.files.hint).toContain('troupe files cli-files-big on that host');

    const text = await troupe([
      'submit',
      'bigout',
      'report',
      '--wait',
      '--id',
      'cli-files-big',
      '--home',
      home,
    ]);
    // The JSON output indented, then where the files are not.
    expect(text.stdout).toContain('output of cli-files-big:\n{\n  "report": "rrr');
    expect(text.stdout).toContain('files of cli-files-big: not on this host;');
  }, 120_000);

  it('lists the workspace as a tree, and prints a file as it is, nested ones too', async () => {
    await mkdir(join(workspace, 'nested', 'deep'), { recursive: true });
    await writeFile(join(workspace, 'nested', 'deep', 'data.json'), '{"ok":true}\n');
    await mkdir(join(workspace, 'node_modules', 'x'), { recursive: true });
    await writeFile(join(workspace, 'node_modules', 'x', 'index.js'), '');
    await symlink('/etc/hostname', join(workspace, 'leak.txt'));

    const listing = await troupe(['files', taskId, '--home', home]);
    expect(listing.code, listing.stderr).toBe(0);
    const lines = listing.stdout.split('\n');
    expect(lines[0]).toBe(
      `task ${taskId} (demo): 2 files, ${listing.stdout.match(/2 files, ([^,]+),/)?.[1]}, in ${workspace}`,
    );
    // Each directory once, its files indented under it.
    expect(lines.findIndex((l) => l.trimEnd().endsWith('nested/'))).toBeLessThan(
      lines.findIndex((l) => / {4}data\.json$/.test(l)),
    );
    expect(listing.stdout).toMatch(/\n\s+deep\/\n/);
    expect(listing.stdout).toMatch(/\d+ B {2}\d{4}-\d\d-\d\d \d\d:\d\d:\d\d {4}hello\.md\n/);
    expect(listing.stdout).toContain(
      'not listed: leak.txt (symlink), node_modules/ (dependencies, caches or version control)',
    );

    const hello = await troupe(['files', taskId, 'notes/hello.md', '--home', home]);
    expect(hello.code, hello.stderr).toBe(0);
    expect(hello.stdout).toBe(await readFile(join(workspace, 'notes', 'hello.md'), 'utf8'));
    const nested = await troupe(['files', taskId, 'nested/deep/data.json', '--home', home]);
    expect(nested.stdout).toBe('{"ok":true}\n');
    const under = await troupe(['files', taskId, 'nested', '--home', home]);
    expect(under.stdout).toContain('1 file, 12 B under nested');
    expect(under.stdout).not.toContain('hello.md');

    const json = await troupe(['files', taskId, '--json', '--home', home]);
    expect(JSON.parse(json.stdout)).toMatchObject({
      taskId,
      pipeline: 'demo',
      workspace,
      files: [
        { path: 'nested/deep/data.json', bytes: 12 },
        { path: 'notes/hello.md', bytes: expect.any(Number) },
      ],
      truncated: false,
    });
  });

  it('troupe up --gateway serves its home’s workspaces over HTTP; troupe gateway refuses a --workspaces that is none', async () => {
    const listing = await fetch(`${gatewayUrl}/v1/tasks/${taskId}/files`);
    expect(listing.status).toBe(200);
    const body = (await listing.json()) as { files: { path: string }[]; maxFileBytes: number };
    expect(body.files.map((f) => f.path)).toContain('notes/hello.md');
    expect(body.maxFileBytes).toBe(16 * 1024 * 1024);
    const hello = await fetch(`${gatewayUrl}/v1/tasks/${taskId}/files/notes/hello.md`);
    expect(hello.headers.get('content-type')).toBe('text/markdown; charset=utf-8');
    expect(await hello.text()).toBe(await readFile(join(workspace, 'notes', 'hello.md'), 'utf8'));
    // Over the cap, the refusal names up's own flag for it, not troupe gateway's.
    await writeFile(join(workspace, 'huge.bin'), Buffer.alloc(16 * 1024 * 1024 + 1));
    const huge = await fetch(`${gatewayUrl}/v1/tasks/${taskId}/files/huge.bin`);
    expect(huge.status).toBe(413);
    const hugeError = ((await huge.json()) as { error: { message: string } }).error.message;
    expect(hugeError).toContain('a larger --gateway-max-file-size');
    // One byte over is not written as the cap itself.
    expect(hugeError).toContain("huge.bin is 16777217 bytes (16 MiB), over this gateway's 16 MiB cap");
    await rm(join(workspace, 'huge.bin'));

    const refused = await troupe([
      'gateway',
      '--no-auth',
      '--listen',
      '0',
      '--home',
      home,
      '--workspaces',
      join(home, 'nope'),
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`--workspaces ${join(home, 'nope')} is not a directory`);
  });

  it('on a terminal, prints text but not a binary file, saying how to save it, unless --force', async () => {
    await writeFile(join(workspace, 'blob.bin'), Buffer.from([0x89, 0x50, 0x00, 0xff]));
    // util-linux's script gives the command a terminal of its own.
    const onTerminal = (args: string[]) =>
      new Promise<{ code: number | null; output: string }>((resolve, reject) => {
        const command = [process.execPath, cliBin, ...args].map((a) => `'${a}'`).join(' ');
        const child = spawn('script', ['-qec', command, '/dev/null'], { env: cliEnv() });
        let output = '';
        child.stdout.on('data', (chunk) => (output += chunk));
        child.on('error', reject);
        child.on('close', (code) => resolve({ code, output }));
      });
    const binary = await onTerminal(['files', taskId, 'blob.bin', '--home', home]);
    expect(binary.code).toBe(1);
    expect(binary.output).toContain(
      `blob.bin is binary (4 bytes): save it with troupe files ${taskId} blob.bin > blob.bin, or print it here with --force`,
    );
    const forced = await onTerminal(['files', taskId, 'blob.bin', '--force', '--home', home]);
    expect(forced.code).toBe(0);
    expect(forced.output).toContain('P\u0000');
    const text = await onTerminal(['files', taskId, 'notes/hello.md', '--home', home]);
    expect(text.code).toBe(0);
    expect(text.output).toContain('# Hello');
    // Into a pipe, a binary file is written as it is.
    const piped = await troupe(['files', taskId, 'blob.bin', '--home', home]);
    expect(Buffer.from(piped.stdout, 'latin1').length).toBeGreaterThan(0);
    expect(piped.code).toBe(0);
    await rm(join(workspace, 'blob.bin'));
  });

  it('refuses a path outside the workspace, a link that leads out, and a missing file, saying which', async () => {
    for (const path of ['../../../../etc/passwd', '/etc/passwd', '..%2F..%2Fetc%2Fpasswd', 'leak.txt']) {
      const refused = await troupe(['files', taskId, path, '--home', home]);
      expect(refused.code, path).toBe(1);
      expect(refused.stdout, path).toBe('');
      expect(refused.stderr, path).toMatch(
        /^troupe: refused: path .* (is outside|is absolute|leads outside)/,
      );
    }
    const missing = await troupe(['files', taskId, 'notes/nope.md', '--home', home]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('troupe: no file or directory notes/nope.md in the workspace\n');
  });

  it('says so when the workspace is not on this host, and names an unknown task or a bad id', async () => {
    const gone = 'cli-files-gone';
    const ran = await troupe(
      [
        'submit',
        'demo',
        'Write a short hello note in notes/hello.md',
        '--wait',
        '--id',
        gone,
        '--home',
        home,
      ],
      undefined,
      90_000,
    );
    expect(ran.code, ran.stderr).toBe(0);
    await rm(join(home, 'workspaces', 'demo', gone), { recursive: true });
    const elsewhere = await troupe(['files', gone, '--home', home]);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toContain(`task ${gone} (demo, completed) has no workspace on this host`);
    expect(elsewhere.stderr).toContain(`<home>/workspaces/demo/${gone}`);
    expect(elsewhere.stderr).toContain(`run troupe files ${gone} on that host`);
    expect(elsewhere.stderr).not.toContain('not found');

    const unknown = await troupe(['files', 'no-such-task', '--home', home]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no task no-such-task is known on this server');
    const bad = await troupe(['files', 'not/a/task', '--home', home]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('"not/a/task" is not a task id');
  }, 120_000);

  it('reads a workspace with no server running, and says when it cannot ask one', async () => {
    await up?.stop();
    up = undefined;
    const listing = await troupe(['files', taskId, '--home', home]);
    expect(listing.code, listing.stderr).toBe(0);
    expect(listing.stdout).toContain('hello.md');
    const unknown = await troupe(['files', 'no-such-task', '--home', home]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(
      `no workspace of task no-such-task is under ${join(home, 'workspaces')}`,
    );
    expect(unknown.stderr).toContain('the server could not be asked about it');
  }, 60_000);
});
