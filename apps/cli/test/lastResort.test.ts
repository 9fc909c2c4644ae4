import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..', '..');

describe('logUnhandledRejections', () => {
  it('keeps the process alive after a rejection nobody handles, and logs it', () => {
    const program = `
      import { createLogger } from '@troupe/runtime';
      import { logUnhandledRejections } from './apps/cli/src/lastResort.ts';
      logUnhandledRejections(createLogger({ level: 'error' }));
      Promise.reject(new Error('nobody handles me'));
      setTimeout(() => console.log('still serving'), 100);
    `;
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program], {
      cwd: root,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain('still serving');
    expect(run.stdout).toMatch(
      /"msg":"a promise was rejected and nothing handled it \(a bug\); the process goes on"/,
    );
    expect(run.stdout).toContain('nobody handles me');
  });
});
