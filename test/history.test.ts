import { jetstream } from '@nats-io/jetstream';
import { BUCKETS, HumanRequest, subjects, type TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, startTroupe, troupe } from './support/cli.ts';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

const lines = (text: string) => text.split('\n').filter((line) => line !== '');
const jsonLines = <T>(text: string): T[] => lines(text).map((line) => JSON.parse(line) as T);

describe('what happened: troupe runs, logs, tail --since and status', () => {
  let h: Harness;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    h = await startHarness([
      examplePath('demo.yaml'),
      fixturePath('stingy.yaml'),
      fixturePath('slowpoke.yaml'),
    ]);
    env = cliEnv({ NATS_URL: h.nats.url });
    publishTask(h, 'demo', { id: 'hist-ok', goal: 'write a hello note' });
    expect((await h.finalOf('hist-ok')).kind).toBe('task.completed');
    // Created after hist-ok, so listed before it.
    publishTask(h, 'stingy', { id: 'hist-fail', goal: 'plan' });
    expect((await h.finalOf('hist-fail')).kind).toBe('task.failed');
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('lists finished tasks newest first, in aligned columns, with filters and JSON', async () => {
    const all = await troupe(['runs'], env);
    expect(all.code, all.stderr).toBe(0);
    const [header, ...rows] = lines(all.stdout);
    expect(header).toMatch(/^PIPELINE\s+VERSION\s+TASK\s+STATE\s+ROUNDS\s+DURATION\s+TOKENS\s+COST\s+AGE$/);
    const failed = rows.findIndex((row) => row.includes('hist-fail'));
    const completed = rows.findIndex((row) => row.includes('hist-ok'));
    expect(failed).toBeGreaterThanOrEqual(0);
    expect(failed).toBeLessThan(completed);
    expect(rows[failed]).toMatch(
      /^stingy\s+[0-9a-f]{12}\s+hist-fail\s+failed \(budget_exceeded\)\s+1\s+\d+\.\d s\s+\d+→\d+\s+\$0\.0000\s+.+ ago$/,
    );
    expect(rows[completed]).toMatch(
      /^demo\s+[0-9a-f]{12}\s+hist-ok\s+completed\s+2\s+\d+\.\d s\s+\d+→\d+\s+\$0\.0000\s+.+ ago$/,
    );
    // Aligned: every column starts where its header does.
    for (const column of ['VERSION', 'TASK', 'STATE', 'DURATION', 'AGE']) {
      const at = header?.indexOf(column) ?? -1;
      for (const row of [rows[failed], rows[completed]])
        expect(row?.[at - 1], `${column} in ${row}`).toBe(' ');
      for (const row of [rows[failed], rows[completed]])
        expect(row?.[at], `${column} in ${row}`).not.toBe(' ');
    }

    const demoOnly = await troupe(['runs', '--pipeline', 'demo'], env);
    expect(demoOnly.stdout).toContain('hist-ok');
    expect(demoOnly.stdout).not.toContain('hist-fail');
    const failedOnly = await troupe(['runs', '--state', 'failed'], env);
    expect(lines(failedOnly.stdout).slice(1)).toEqual([expect.stringContaining('hist-fail')]);
    const newest = await troupe(['runs', '--limit', '1'], env);
    expect(lines(newest.stdout)).toHaveLength(2);
    expect(newest.stderr).toContain('showing the 1 newest of');

    const json = await troupe(['runs', '--json', '--pipeline', 'stingy'], env);
    const records = jsonLines<Record<string, unknown>>(json.stdout);
    expect(records).toEqual([
      expect.objectContaining({ taskId: 'hist-fail', status: 'failed', pipeline: 'stingy' }),
    ]);
    expect(records[0]).not.toHaveProperty('snapshot');

    const misspelled = await troupe(['runs', '--state', 'complete'], env);
    expect(misspelled.code).toBe(2);
    expect(misspelled.stderr).toContain('--state: no state "complete" (did you mean "completed"?)');
    const otherPipeline = await troupe(['runs', '--pipeline', 'dmeo'], env);
    expect(otherPipeline.stdout).toContain('no tasks of pipeline dmeo (did you mean "demo"?)');
  });

  it('totals tokens and cost per pipeline and per day, over every task the filters keep', async () => {
    const records = jsonLines<WorkflowRecord>(
      (await troupe(['runs', '--json', '--limit', '1000'], env)).stdout,
    );
    const sum = (of: WorkflowRecord[]) => of.reduce((n, r) => n + r.usage.inputTokens, 0);
    const byPipeline = await troupe(['runs', '--totals', 'pipeline', '--limit', '1'], env);
    expect(byPipeline.code, byPipeline.stderr).toBe(0);
    const [header, ...rows] = lines(byPipeline.stdout);
    expect(header).toMatch(/^PIPELINE\s+TASKS\s+CALLS\s+TOKENS\s+COST$/);
    const demo = records.filter((r) => r.pipeline === 'demo');
    expect(rows).toContainEqual(
      expect.stringMatching(
        new RegExp(`^demo\\s+${demo.length}\\s+\\d+\\s+${sum(demo)}→\\d+\\s+\\$0\\.0000$`),
      ),
    );
    expect(rows.at(-1)).toMatch(new RegExp(`^total\\s+${records.length}\\s+\\d+\\s+${sum(records)}→`));
    const byDay = jsonLines<{ day: string; tasks: number }>(
      (await troupe(['runs', '--totals', 'day', '--json', '--state', 'failed'], env)).stdout,
    );
    const failed = records.filter((r) => r.status === 'failed');
    expect(byDay.reduce((n, t) => n + t.tasks, 0)).toBe(failed.length);
    expect(byDay.map((t) => t.day)).toContain(failed[0]?.createdAt.slice(0, 10));
    const unknown = await troupe(['runs', '--totals', 'week'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('--totals: cannot total by "week"');
  });

  it("prints a finished task's whole flow in order, each event once, ending with task.completed", async () => {
    // An event stored twice, as when it is republished beyond the stream's duplicate window.
    const stored = h.eventsOf('hist-ok');
    const again = stored.find((e) => e.kind === 'step.completed');
    if (!again) throw new Error('hist-ok has no step.completed');
    await jetstream(h.client).publish(
      subjects.event(again.pipeline, again.taskId, again.kind),
      JSON.stringify(again),
      { msgID: 'stored-twice' },
    );

    const flow = await troupe(['logs', 'hist-ok'], env);
    expect(flow.code, flow.stderr).toBe(0);
    const printed = lines(flow.stdout);
    expect(printed[0]).toMatch(/demo\/hist-ok\s+user → demo\s+task\.accepted\s+write a hello note/);
    expect(printed.at(-1)).toMatch(/workflow → user\s+task\.completed\s+2 round\(s\)/);

    const raw = jsonLines<TroupeEvent>((await troupe(['logs', 'hist-ok', '--json'], env)).stdout);
    expect(raw.map((e) => e.id)).toEqual([...new Set(stored.map((e) => e.id))]);
    expect(raw).toHaveLength(printed.length);

    const unknown = await troupe(['logs', 'no-such-task'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no task no-such-task is known');
  });

  it('follows a running task from its history to its end, and says how it ended in its exit code', async () => {
    publishTask(h, 'slowpoke', { id: 'hist-slow', goal: 'take your time' });
    await waitUntil(() => kinds(h.eventsOf('hist-slow')).includes('llm.request'));

    const running = await troupe(['runs', '--state', 'running'], env);
    expect(running.stdout).toMatch(/slowpoke\s+[0-9a-f]{12}\s+hist-slow\s+running\s+1\s+[\d.]+ s so far/);
    const snapshot = await troupe(['logs', 'hist-slow'], env);
    expect(snapshot.code).toBe(0);
    expect(snapshot.stderr).toContain('task hist-slow is still running');

    const follow = startTroupe(['logs', 'hist-slow', '--follow'], env);
    await follow.waitFor(/following hist-slow until it finishes/);
    expect(follow.output()).toMatch(/task\.accepted[\s\S]*llm\.request/);
    expect((await troupe(['cancel', 'hist-slow', '--reason', 'seen enough'], env)).code).toBe(0);
    await follow.waitFor(/task\.cancelled\s+seen enough/);
    // It ends by itself; no signal is sent.
    await expect.poll(() => follow.child.exitCode, { timeout: 30_000 }).toBe(1);
    expect(follow.output().match(/task\.accepted/g)).toHaveLength(1);
  });

  it('tails from a while ago, then live, until told to stop', async () => {
    const tail = startTroupe(['tail', '--since', '10m', '--json'], env);
    await tail.waitFor(/watching all tasks/);
    expect(tail.output()).toContain('"taskId":"hist-ok"');
    expect(tail.output()).toContain('"taskId":"hist-fail"');
    publishTask(h, 'demo', { id: 'hist-live', goal: 'write a hello note' });
    await tail.waitFor(/"taskId":"hist-live"[^\n]*"kind":"task\.completed"/);
    expect(await tail.stop('SIGTERM')).toBe(0);
    const ids = lines(tail.output())
      .filter((line) => line.startsWith('{'))
      .map((line) => (JSON.parse(line) as TroupeEvent).id);
    expect(ids.length).toBeGreaterThan(0);
    expect(new Set(ids).size).toBe(ids.length);

    const filtered = startTroupe(
      ['tail', '--since', '10m', '--kind', 'task.completed,task.failed', '--agent', 'workflow'],
      env,
    );
    await filtered.waitFor(/watching all tasks/);
    const code = await filtered.stop('SIGINT');
    expect(code, filtered.output()).toBe(0);
    const shown = lines(filtered.output()).filter((line) => !line.startsWith('watching'));
    expect(shown.length).toBeGreaterThanOrEqual(2);
    for (const line of shown) expect(line).toMatch(/workflow → user\s+task\.(completed|failed)/);

    const badSince = await troupe(['tail', '--since', '5x'], env);
    expect(badSince.code).toBe(2);
    expect(badSince.stderr).toContain('--since: "5x" is not a duration');
    const badKind = await troupe(['tail', '--kind', 'task.complete'], env);
    expect(badKind.code).toBe(2);
    expect(badKind.stderr).toContain('(did you mean "task.completed"?)');
  });

  it('tails a finished task: its history, that it has finished and how, then exits', async () => {
    const finished = await troupe(['tail', '-t', 'hist-fail'], env);
    expect(finished.code).toBe(0);
    expect(lines(finished.stdout)[0]).toMatch(/task\.accepted/);
    expect(lines(finished.stdout).at(-1)).toMatch(/task\.failed\s+budget_exceeded/);
    expect(finished.stderr).toContain('task hist-fail has finished: failed (budget_exceeded)');

    publishTask(h, 'slowpoke', { id: 'hist-tailed', goal: 'take your time' });
    await waitUntil(() => kinds(h.eventsOf('hist-tailed')).includes('llm.request'));
    const tail = startTroupe(['tail', '-t', 'hist-tailed'], env);
    await tail.waitFor(/watching task hist-tailed/);
    expect(tail.output()).toMatch(/task\.accepted[\s\S]*llm\.request/);
    await troupe(['cancel', 'hist-tailed'], env);
    await tail.waitFor(/task hist-tailed has finished: cancelled/);
    await expect.poll(() => tail.child.exitCode, { timeout: 30_000 }).toBe(0);
  });

  it("shows a finished task's duration, which does not grow", async () => {
    const first = await troupe(['status', 'hist-ok'], env);
    expect(first.stdout).toMatch(
      /^hist-ok\s+demo@[0-9a-f]{12}\s+completed\s+step completed \(round 2\)\s+.*took \d+\.\d s\s+write a hello note/,
    );
    const then = Date.now();
    await expect.poll(() => Date.now() - then, { timeout: 5_000 }).toBeGreaterThanOrEqual(1_100);
    const second = await troupe(['status', 'hist-ok'], env);
    expect(second.stdout).toBe(first.stdout);
  });

  it('says why a running task is not moving, from its record and its pending requests', async () => {
    const workflows = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    const approvals = await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest);
    const now = Date.now();
    const at = (msAgo: number) => new Date(now - msAgo).toISOString();
    const running = (taskId: string, activity?: WorkflowRecord['activity']): WorkflowRecord => ({
      taskId,
      pipeline: 'release',
      streamSequence: 999_000,
      status: 'running',
      state: 'ship',
      goal: 'ship it',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: at(60_000),
      updatedAt: at(12_000),
      ...(activity ? { activity } : {}),
    });
    const step = { step: 'ship', agent: 'engineer', since: at(12_000) };
    await workflows.put(
      'act-person',
      running('act-person', { kind: 'person', ...step, request: { kind: 'approval', id: 'ap-act-1' } }),
    );
    await workflows.put('act-worker', running('act-worker', { kind: 'worker', ...step }));
    await workflows.put('act-agent', running('act-agent', { kind: 'agent', ...step }));
    await workflows.put('act-quiet', running('act-quiet'));
    await approvals.put('release.q-act-2', {
      id: 'q-act-2',
      kind: 'question',
      taskId: 'act-quiet',
      pipeline: 'release',
      agent: 'engineer',
      stepId: 'act-quiet.ship.1',
      prompt: 'Ship today?',
      status: 'pending',
      requestedAt: at(5_000),
      expiresAt: new Date(now + 300_000).toISOString(),
    });

    const status = await troupe(['status'], env);
    expect(status.code, status.stderr).toBe(0);
    const below = (taskId: string) => {
      const all = lines(status.stdout);
      const at = all.findIndex((line) => line.startsWith(`${taskId} `));
      return all[at + 1];
    };
    expect(status.stdout).toMatch(/^act-person\s+release\s+running\s+step ship \(round 1\)/m);
    expect(below('act-person')).toBe(
      '  waiting for a person: approval ap-act-1 (troupe approve ap-act-1 / troupe deny ap-act-1 "<reason>")',
    );
    expect(below('act-worker')).toBe(
      '  waiting for a worker that serves agent engineer (start one: troupe worker <pipeline.yaml>)',
    );
    const working = /^ {2}agent engineer working on step ship \(for (\d+) s\)$/.exec(
      below('act-agent') ?? '',
    );
    expect(Number(working?.[1])).toBeGreaterThanOrEqual(12);
    expect(below('act-quiet')).toBe('  waiting for a person: question q-act-2 (troupe answer q-act-2 "…")');
  });
});
