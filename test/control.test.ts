import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
} from './support/harness.ts';

async function waitUntil(check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('troupe status and troupe cancel', () => {
  let h: Harness;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    h = await startHarness([fixturePath('slowpoke.yaml')]);
    env = cliEnv({ NATS_URL: h.nats.url });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('shows a running task, cancels it mid-model-call, and says so afterwards', async () => {
    publishTask(h, 'slowpoke', { id: 'slow-cancel', goal: 'take your time' });
    await waitUntil(() => kinds(h.eventsOf('slow-cancel')).includes('llm.request'));

    const running = await troupe(['status'], env);
    expect(running.stdout).toMatch(/slow-cancel\s+slowpoke\s+running\s+step plan \(round 1\)/);

    const cancelled = await troupe(['cancel', 'slow-cancel', '--reason', 'changed my mind'], env);
    expect(cancelled.code).toBe(0);
    const final = await h.finalOf('slow-cancel');
    expect(final.kind).toBe('task.cancelled');
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('changed my mind');
    expect(kinds(h.eventsOf('slow-cancel'))).not.toContain('llm.response');
    expect(h.coordinator.running()).not.toContain('slow-cancel');

    const after = await troupe(['status', 'slow-cancel'], env);
    expect(after.stdout).toMatch(/slow-cancel\s+slowpoke\s+cancelled/);
    expect((await troupe(['status'], env)).stdout).toContain('no task is running');
    const again = await troupe(['cancel', 'slow-cancel'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already cancelled; nothing to cancel');
    const unknown = await troupe(['cancel', 'no-such-task'], env);
    expect(unknown.stderr).toContain('no task no-such-task is known');
  });
});

describe('troupe worker', () => {
  let h: Harness;
  let home: string;
  let worker: CliProcess | undefined;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')], { hostAgents: false });
    home = await mkdtemp(join(tmpdir(), 'troupe-worker-'));
  });
  afterAll(async () => {
    await worker?.stop();
    await h?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('serves the agents of a coordinator that runs workflows only', async () => {
    worker = startTroupe(
      ['worker', examplePath('demo.yaml'), '--home', home, '--json'],
      cliEnv({ NATS_URL: h.nats.url }),
    );
    await worker.waitFor(/troupe worker on .* serving demo: planner, executor, reviewer/);
    publishTask(h, 'demo', { id: 'via-worker', goal: 'write a hello note' });
    expect((await h.finalOf('via-worker', 30_000)).kind).toBe('task.completed');
    // The worker, not the coordinator's process, ran the steps: the files are in the worker's workspace.
    const { readFile } = await import('node:fs/promises');
    const note = await readFile(join(home, 'workspaces', 'demo', 'via-worker', 'notes', 'hello.md'), 'utf8');
    expect(note).toContain('Hello from Troupe');
  });

  it('refuses to serve an agent the pipelines do not have', async () => {
    const result = await troupe(
      ['worker', examplePath('demo.yaml'), '--agents', 'planer'],
      cliEnv({ NATS_URL: h.nats.url }),
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('no agent named planer');
  });
});
