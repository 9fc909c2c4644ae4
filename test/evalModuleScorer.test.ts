import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readTaskEvents } from '@troupe/client';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';

/**
 * A module scorer written in TypeScript runs from the compiled `troupe`, which imports it as it imports the
 * pipeline's tool modules (through tsx); the coordinator itself no longer loads tsx. `troupe eval run` scores a
 * dataset file's cases with it, and `troupe up` scores a live task with it online.
 */
const PIPELINE = `
version: 1
name: graded
models:
  scripted: { provider: scripted, script: ./graded.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: Say when it is done. }
flow:
  - { id: write, kind: agent, agent: writer }
evals:
  scorers:
    - { type: module, name: grade, path: ./grade.ts }
`;

/** Type annotations and an interface: Node 20 alone cannot load it. */
const GRADE = `
interface Run { output: string | undefined }
export function score(run: Run): { value: number; reason: string } {
  const said: string = run.output ?? '';
  return { value: said.includes('done') ? 0.75 : 0, reason: \`graded \${said.length} characters\` };
}
`;

describe('a module scorer in TypeScript', () => {
  let nats: TestNats;
  let dir: string;
  let up: CliProcess | undefined;

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-ts-scorer-'));
    await writeFile(join(dir, 'graded.yaml'), PIPELINE);
    await writeFile(join(dir, 'graded.script.yaml'), 'agents:\n  writer:\n    - content: all done\n');
    await writeFile(join(dir, 'grade.ts'), GRADE);
    await writeFile(
      join(dir, 'cases.yaml'),
      'name: graded\nscorers:\n  - { type: module, name: grade, path: ./grade.ts }\ncases:\n  - { id: one, goal: say when done }\n',
    );
  }, 60_000);

  afterAll(async () => {
    await up?.stop();
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('scores a dataset file under troupe eval run', async () => {
    const run = await troupe(
      [
        'eval',
        'run',
        join(dir, 'cases.yaml'),
        '--pipeline',
        join(dir, 'graded.yaml'),
        '--mode',
        'live',
        '--no-store',
      ],
      cliEnv(),
      60_000,
      dir,
    );
    expect(run.stderr).not.toContain('could not be loaded');
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain('0.75');
  });

  it('scores a live task online under troupe up', async () => {
    const env = cliEnv({ NATS_URL: nats.url });
    up = startTroupe(['up', join(dir, 'graded.yaml'), '--home', join(dir, 'home')], env);
    await up.waitFor(/troupe is up on/, 60_000);
    const submitted = await troupe(
      ['submit', 'graded', 'say when done', '--id', 'ts-1', '--server', nats.url],
      env,
    );
    expect(submitted.code, submitted.stderr).toBe(0);
    const bus = await NatsBus.connect({
      servers: nats.url,
      name: 'ts-scorer-test',
      logger: createLogger({ level: 'silent' }),
    });
    try {
      const scored = async () =>
        (await readTaskEvents(bus, 'ts-1', 'graded')).find((event) => event.kind === 'eval.scored');
      await expect.poll(scored, { timeout: 30_000 }).toBeDefined();
      const event = await scored();
      expect(event?.kind === 'eval.scored' && event.data.scores).toEqual([
        expect.objectContaining({ scorer: 'grade', value: 0.75, pass: true, reason: 'graded 8 characters' }),
      ]);
    } finally {
      await bus.close();
    }
  });
});
