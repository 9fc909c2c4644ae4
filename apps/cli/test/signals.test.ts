import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..', '..');

/** Runs `program` (ESM, with tsx) in a child, sends it SIGTERM once it prints `ready`, and says how it ended. */
function stopChild(program: string): Promise<{ code: number | null; stderr: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let signalled = 0;
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.stdout.on('data', (chunk: Buffer) => {
      if (signalled === 0 && chunk.toString().includes('ready')) {
        signalled = performance.now();
        child.kill('SIGTERM');
      }
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child did not end:\n${stderr}`));
    }, 20_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, ms: performance.now() - signalled });
    });
  });
}

describe('untilStopped', () => {
  it('exits with code 1 once the bound has passed, saying what it left, when the stop never ends', async () => {
    const program = `
      import { untilStopped } from './apps/cli/src/signals.ts';
      // A stop stuck for good (as one on NATS was), and something keeping the process alive.
      setInterval(() => {}, 1000);
      void untilStopped(() => new Promise(() => {}), 'stopping', {
        timeoutMs: 300,
        leftBehind: () => '2 tasks (a, b) to NATS',
        beforeExit: () => process.stderr.write('before exit\\n'),
      });
      console.log('ready');
    `;
    const { code, stderr, ms } = await stopChild(program);
    expect(code, stderr).toBe(1);
    expect(stderr).toContain('stopping (at most 0.3 s)');
    expect(stderr).toContain(
      'troupe: the stop did not finish within 0.3 s (--stop-timeout); exiting now, leaving 2 tasks (a, b) to NATS',
    );
    expect(stderr).toContain('before exit');
    expect(ms).toBeLessThan(5_000);
  });

  it('gives the stop its time less a margin, and exits 0 when it has finished however long it took', async () => {
    const program = `
      import { untilStopped } from './apps/cli/src/signals.ts';
      const keepAlive = setInterval(() => {}, 1000);
      void untilStopped(async (ms) => {
        process.stderr.write('given ' + ms + '\\n');
        await new Promise((resolve) => setTimeout(resolve, 100));
        clearInterval(keepAlive);
      }, 'stopping', { timeoutMs: 20_000 }).then(() => process.stderr.write('stopped\\n'));
      console.log('ready');
    `;
    const { code, stderr } = await stopChild(program);
    expect(code, stderr).toBe(0);
    expect(stderr).toContain('given 19000');
    expect(stderr).toContain('stopped');
    expect(stderr).not.toContain('did not finish');
  });

  it('exits at the bound with the code set when a finished stop left something holding the process', async () => {
    const program = `
      import { untilStopped } from './apps/cli/src/signals.ts';
      // A handle nobody closes: the stop itself finishes, the process would not end.
      setInterval(() => {}, 1000);
      void untilStopped(async () => {}, 'stopping', { timeoutMs: 300 }).then(() => { process.exitCode = 0; });
      console.log('ready');
    `;
    const { code, stderr } = await stopChild(program);
    expect(code, stderr).toBe(0);
    expect(stderr).not.toContain('did not finish');
  });
});
