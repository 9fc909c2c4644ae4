import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUCKETS, type ErrorReply, subjects, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

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
    expect(running.stdout).toMatch(/slow-cancel\s+slowpoke@[0-9a-f]{12}\s+running\s+step plan \(round 1\)/);

    const cancelled = await troupe(['cancel', 'slow-cancel', '--reason', 'changed my mind'], env);
    expect(cancelled.code).toBe(0);
    const final = await h.finalOf('slow-cancel');
    expect(final.kind).toBe('task.cancelled');
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('changed my mind');
    expect(kinds(h.eventsOf('slow-cancel'))).not.toContain('llm.response');
    expect(h.coordinator.running()).not.toContain('slow-cancel');

    const after = await troupe(['status', 'slow-cancel'], env);
    expect(after.stdout).toMatch(/slow-cancel\s+slowpoke@[0-9a-f]{12}\s+cancelled/);
    expect((await troupe(['status'], env)).stdout).toContain('no task is running');
    const again = await troupe(['cancel', 'slow-cancel'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already cancelled; nothing to cancel');
    const unknown = await troupe(['cancel', 'no-such-task'], env);
    expect(unknown.stderr).toContain('no task no-such-task is known');
  });

  it('answers a control request for a task nobody runs at once, with the task state', async () => {
    const ask = async (taskId: string) => {
      const started = Date.now();
      const reply = await h.client.request(subjects.control(taskId), JSON.stringify({ action: 'cancel' }), {
        timeout: 10_000,
      });
      return { answer: reply.json<ErrorReply>(), ms: Date.now() - started };
    };
    const unknown = await ask('never-submitted');
    expect(unknown.answer).toEqual({
      ok: false,
      error: { code: 'unknown_task', message: 'no task never-submitted is known' },
    });
    // The reply comes from a lookup, not a timeout (no answer at all before: the request timed out).
    expect(unknown.ms).toBeLessThan(5_000);
    expect((await ask('not!an-id')).answer.error.code).toBe('unknown_task');

    publishTask(h, 'slowpoke', { id: 'slow-over', goal: 'take your time' });
    await waitUntil(() => kinds(h.eventsOf('slow-over')).includes('llm.request'));
    await troupe(['cancel', 'slow-over'], env);
    await h.finalOf('slow-over');
    await expect
      .poll(async () => (await ask('slow-over')).answer.error)
      .toEqual({
        code: 'task_ended',
        message: 'task slow-over has already ended: cancelled; nothing was changed',
      });

    // A record that says running, and no coordinator that runs it: its coordinator died, it awaits redelivery.
    const store = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    const now = new Date().toISOString();
    await store.put('orphaned-1', {
      taskId: 'orphaned-1',
      pipeline: 'slowpoke',
      streamSequence: 999_999,
      status: 'running',
      state: 'plan',
      goal: 'lost',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: now,
      updatedAt: now,
    });
    const orphaned = await ask('orphaned-1');
    expect(orphaned.answer.error.code).toBe('not_running');
    expect(orphaned.answer.error.message).toMatch(
      /^task orphaned-1 has not ended \(it is at plan, round 1\) but no coordinator runs it right now/,
    );
    const viaCli = await troupe(['cancel', 'orphaned-1'], env);
    expect(viaCli.code).toBe(1);
    expect(viaCli.stderr).toContain('no coordinator runs it right now');
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
    expect(result.stderr).toBe(
      `troupe: no agent named planer (did you mean "planner"?) in ${examplePath('demo.yaml')}; it has: planner, executor, reviewer\n`,
    );
  });
});

describe('a workflow with no worker for its agent', () => {
  let h: Harness;
  const lines: string[] = [];

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')], { hostAgents: false, logLines: lines });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('says it waits for a worker, in status and once in the log, then fails with no_worker and the right hint', async () => {
    publishTask(h, 'demo', { id: 'workerless', goal: 'nobody home' });
    const workflows = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    await expect
      .poll(async () => (await workflows.get('workerless'))?.value.activity)
      .toMatchObject({ kind: 'worker', step: 'plan', agent: 'planner' });
    const status = await troupe(['status', 'workerless'], cliEnv({ NATS_URL: h.nats.url }));
    expect(status.stdout).toContain('waiting for a worker that serves agent planner');

    const final = await h.finalOf('workerless', 30_000);
    expect(final.kind === 'task.failed' && final.data.reason).toBe('no_worker');
    expect(final.kind === 'task.failed' && final.data.message).toContain('start `troupe worker`');
    // Sent again every 2 s or so for the 5 s it waited: one line at info for the first send, one warning.
    const sent = lines.filter(
      (l) => l.includes('"subject":"troupe.agents.demo.planner"') && l.includes('"dir":"out"'),
    );
    expect(sent.filter((l) => l.includes('"level":30'))).toHaveLength(1);
    expect(lines.filter((l) => l.includes('no worker serves agent planner yet'))).toHaveLength(1);
  });
});
