import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

/**
 * `troupe submit --wait` when the final event never reaches it live (as a failover between nats-servers can cost
 * it): a user the server shows none of the task's events, and who may not read the stored events either, still gets
 * the task's ending from its record in `workflows`.
 */
describe('troupe submit --wait without the final event', () => {
  let nats: TestNats;
  let home: string;
  let up: CliProcess | undefined;

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-submit-wait-'));
    nats = await startTestNats({
      config: `
authorization {
  users = [
    { user: admin, password: "admin-pass" }
    {
      user: blind, password: "blind-pass",
      permissions: {
        publish: { allow: [">"], deny: ["$JS.API.CONSUMER.CREATE.EVENTS.>"] }
        subscribe: { allow: [">"], deny: ["troupe.events.demo.blind-1.>"] }
      }
    }
  ]
}
`,
    });
    up = startTroupe(
      ['up', examplePath('demo.yaml'), '--home', home],
      cliEnv({ NATS_URL: nats.url, NATS_USER: 'admin', NATS_PASSWORD: 'admin-pass' }),
    );
    await up.waitFor(/troupe is up/, 30_000);
  });
  afterAll(async () => {
    await up?.stop('SIGKILL');
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('takes the ending from the task record, with the final event it keeps', async () => {
    const result = await troupe(
      [
        'submit',
        'demo',
        'Write a short hello note in notes/hello.md',
        '--wait',
        '--id',
        'blind-1',
        '--json',
        '--timeout',
        '60',
      ],
      cliEnv({ NATS_URL: nats.url, NATS_USER: 'blind', NATS_PASSWORD: 'blind-pass' }),
      90_000,
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { kind?: string; data?: { output: string } });
    // It saw nothing live: the ending came from the record, which keeps the final event.
    expect(lines.filter((line) => line.kind !== undefined).map((line) => line.kind)).toEqual([
      'task.completed',
    ]);
    // Then the result, its last line: the output that final event holds.
    expect(lines.at(-1)).toMatchObject({
      taskId: 'blind-1',
      status: 'completed',
      output: lines[0]?.data?.output,
    });
  }, 120_000);

  it('gives up at its timeout with exit code 3, and exits: nothing it watched keeps it running', async () => {
    const result = await troupe(
      ['submit', 'demo', 'Write a short hello note in notes/hello.md', '--wait', '--timeout', '0.01'],
      cliEnv({ NATS_URL: nats.url, NATS_USER: 'admin', NATS_PASSWORD: 'admin-pass' }),
      20_000,
    );
    expect(result.code, result.stderr).toBe(3);
    expect(result.stderr).toContain('did not finish within 0.01 s; it keeps running');
  });
});
