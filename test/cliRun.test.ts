import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import { examplePath, fixturePath } from './support/harness.ts';

const WARNING = 'troupe run: in-process, nothing is stored; a crash loses this task';

let home: string;
/** No NATS_URL (cliEnv drops it) and a PATH with no nats-server on it: nothing to connect to or start. */
let env: NodeJS.ProcessEnv;
beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), 'troupe-cli-run-'));
  const emptyBin = join(home, 'bin');
  env = cliEnv({ PATH: emptyBin, TROUPE_HOME: home });
});
afterAll(async () => {
  await rm(home, { recursive: true, force: true });
});

describe('troupe run: one task in-process, with no server', () => {
  it('runs the demo to completion, printing its events and result as submit --wait does', async () => {
    const result = await troupe(
      ['run', examplePath('demo.yaml'), 'Write a hello note', '--id', 'run-1', '--home', home],
      env,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr.split('\n')[0]).toBe(WARNING);
    expect(result.stdout).toMatch(/demo\/run-1 .* task\.accepted/);
    expect(result.stdout).toMatch(/reviewer → executor .* agent\.handoff .* rework/);
    expect(result.stdout).toMatch(/task\.completed .* 2 round\(s\)/);
    expect(result.stdout).toContain('output of run-1:');
    expect(result.stdout).toContain(`files of run-1: 1 file in ${join(home, 'workspaces', 'demo', 'run-1')}`);
    expect(await readFile(join(home, 'workspaces', 'demo', 'run-1', 'notes', 'hello.md'), 'utf8')).toContain(
      'reviewed and approved',
    );
  });

  it('prints JSON lines with --json: the events, then the result', async () => {
    const result = await troupe(
      ['run', examplePath('demo.yaml'), 'Write a hello note', '--json', '--home', home],
      env,
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines[0].kind).toBe('task.accepted');
    expect(lines.at(-2).kind).toBe('task.completed');
    expect(lines.at(-1)).toMatchObject({ pipeline: 'demo', status: 'completed', files: { here: true } });
  });

  it('denies a call an ask rule holds, saying --yes allows it; --yes does', async () => {
    const denied = await troupe(
      ['run', fixturePath('gated.yaml'), 'Write the release note', '--home', home],
      env,
    );
    expect(denied.code, denied.stderr).toBe(0);
    expect(denied.stdout).toMatch(/write_file denied: .*troupe run has no person to approve calls; run/);
    const allowed = await troupe(
      [
        'run',
        fixturePath('gated.yaml'),
        'Write the release note',
        '--yes',
        '--id',
        'run-yes',
        '--home',
        home,
      ],
      env,
    );
    expect(allowed.code, allowed.stderr).toBe(0);
    expect(allowed.stdout).toMatch(/write_file ok .* release\/v1\.md/);
    expect(await readFile(join(home, 'workspaces', 'gated', 'run-yes', 'release', 'v1.md'), 'utf8')).toBe(
      'shipped',
    );
  });

  it('fails a human step, saying nobody is there to answer, with exit code 1', async () => {
    const result = await troupe(['run', fixturePath('confirming.yaml'), 'Ship it', '--home', home], env);
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/task\.failed .* troupe run has no person to answer questions/);
  });

  it('refuses an input its pipeline’s schema does not take, saying why, with exit code 2', async () => {
    const result = await troupe(
      ['run', fixturePath('summing.yaml'), 'Add them', '--input', '{"numbers":[]}', '--home', home],
      env,
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/numbers/);
    expect(result.stderr).not.toMatch(/\bat /);
  });

  it('refuses a pipeline file that does not load, with exit code 2', async () => {
    const result = await troupe(['run', join(home, 'missing.yaml'), 'goal', '--home', home], env);
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toBe(WARNING);
  });
});
