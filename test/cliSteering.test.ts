import { BUCKETS, type ControlMessage, subjects, WorkflowRecord } from '@troupe/protocol';
import { ensureTroupeStreams, KvStore, NatsBus } from '@troupe/runtime';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import { runningRecord } from './support/taskRecord.ts';

/** What the stand-in coordinator heard, with the task it was for. */
const heard: { taskId: string; message: ControlMessage }[] = [];
/** When the records were written: cli-held was paused 30 s before. */
let seededAt: number;

describe('troupe pause, resume and tell', () => {
  let nats: TestNats;
  let coordinator: NatsBus;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    nats = await startTestNats();
    env = cliEnv({ NATS_URL: nats.url });
    coordinator = await NatsBus.connect({
      servers: nats.url,
      name: 'coordinator',
      logger: captureLogger().logger,
    });
    await ensureTroupeStreams(coordinator);
    const store = await KvStore.open(coordinator, BUCKETS.workflows, WorkflowRecord);
    const now = Date.now();
    seededAt = now;
    const record = (taskId: string, extra: Partial<WorkflowRecord> = {}): WorkflowRecord =>
      runningRecord(taskId, 'demo', {
        goal: `the goal of ${taskId}`,
        createdAt: new Date(now - 60_000).toISOString(),
        updatedAt: new Date(now).toISOString(),
        ...extra,
      });
    await store.put('cli-work', record('cli-work'));
    await store.put(
      'cli-held',
      record('cli-held', {
        paused: { since: new Date(now - 30_000).toISOString(), by: 'ana', reason: 'v1 API' },
      }),
    );
    await store.put('cli-done', record('cli-done', { status: 'completed', state: 'done' }));
    await store.put('cli-slow', record('cli-slow'));
    // A stand-in for the coordinator running the tasks, answering as one does: cli-held is held, cli-work is not.
    for (const subject of [subjects.allControl, subjects.allSteer]) {
      coordinator.subscribeText(subject, (delivery) => {
        const taskId = delivery.subject.slice(delivery.subject.lastIndexOf('.') + 1);
        const message = JSON.parse(delivery.value) as ControlMessage;
        heard.push({ taskId, message });
        const held = taskId === 'cli-held';
        const refuse = (code: string, text: string) => ({ ok: false, error: { code, message: text } });
        // Its coordinator takes the message (it may record it) but its answer never comes.
        if (taskId === 'cli-slow') return;
        if (message.action === 'tell')
          return delivery.respond({ ok: true, taskId, outcome: 'told', messageId: 'm-1' });
        if (message.action === 'pause')
          return delivery.respond(
            held
              ? refuse('already_paused', `task ${taskId} is paused already`)
              : { ok: true, taskId, outcome: 'paused' },
          );
        return delivery.respond(
          held
            ? { ok: true, taskId, outcome: 'resumed' }
            : refuse('not_paused', `task ${taskId} is not paused`),
        );
      });
    }
    await coordinator.flush();
  });
  afterAll(async () => {
    await coordinator?.close();
    await nats?.stop();
  });

  it('pause, resume and tell through the coordinator running the task, saying what happens next', async () => {
    heard.length = 0;
    const paused = await troupe(['pause', 'cli-work', '--reason', 'wrong API', '--by', 'ana'], env);
    expect(paused).toMatchObject({ code: 0, stderr: '' });
    expect(paused.stdout).toBe(
      'cli-work: paused; the step at work stops after its current model or tool call (troupe resume cli-work lets it go on)\n',
    );
    expect(await troupe(['resume', 'cli-held', '--by', 'ana'], env)).toMatchObject({
      code: 0,
      stdout: 'cli-held: resumed\n',
    });
    const told = await troupe(['tell', 'cli-work', 'use', 'the', 'v2', 'API'], env);
    expect(told).toMatchObject({
      code: 0,
      stdout: 'cli-work: told (m-1); the agent at work reads it before its next model call\n',
    });
    expect(heard).toEqual([
      { taskId: 'cli-work', message: { action: 'pause', reason: 'wrong API', by: 'ana' } },
      { taskId: 'cli-held', message: { action: 'resume', by: 'ana' } },
      {
        taskId: 'cli-work',
        message: {
          action: 'tell',
          text: 'use the v2 API',
          by: expect.stringContaining('@'),
          key: expect.stringMatching(/^[0-9a-f-]{36}$/),
        },
      },
    ]);
  });

  it('tell reads the message from standard input for -', async () => {
    heard.length = 0;
    const { code, stdout } = await troupe(
      ['tell', 'cli-work', '-'],
      env,
      30_000,
      undefined,
      'first line\nsecond line\n',
    );
    expect({ code, stdout }).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('cli-work: told (m-1)'),
    });
    expect(heard[0]?.message).toMatchObject({ action: 'tell', text: 'first line\nsecond line' });
  });

  it('say why nothing changed, with exit code 1, or 2 for a message that is not there', async () => {
    // Each on its own: run side by side, as each CLI process takes a second to start.
    const [again, notPaused, ended, unknown, blank, none] = await Promise.all([
      troupe(['pause', 'cli-held'], env),
      troupe(['resume', 'cli-work'], env),
      troupe(['tell', 'cli-done', 'hi'], env),
      troupe(['resume', 'cli-nobody'], env),
      troupe(['tell', 'cli-work', ' '], env),
      troupe(['tell', 'cli-work'], env),
    ]);
    expect(again).toMatchObject({ code: 1, stderr: 'troupe: task cli-held is paused already\n' });
    expect(notPaused.stderr).toBe('troupe: task cli-work is not paused\n');
    expect(ended).toMatchObject({
      code: 1,
      stderr: 'troupe: task cli-done already completed; nothing to tell\n',
    });
    expect(unknown).toMatchObject({
      code: 1,
      stderr: 'troupe: no task cli-nobody is known on this server\n',
    });
    expect(blank).toMatchObject({
      code: 2,
      stderr: 'troupe: say what to tell the task\n',
    });
    expect(none.code).toBe(1);
  });

  it('status and runs show a paused task as paused, with who paused it, when and why', async () => {
    // Each on its own: run side by side, as each CLI process takes a second to start.
    const [status, json, runs, running] = await Promise.all([
      troupe(['status'], env),
      troupe(['status', 'cli-held', '--json'], env),
      troupe(['runs', '--state', 'paused'], env),
      troupe(['runs', '--state', 'running'], env),
    ]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/^cli-held {2}demo {2}paused {3} {2}step plan/m);
    expect(status.stdout).toMatch(/^cli-work {2}demo {2}running {2}/m);
    // For as long as since the pause: 30 s before the records were written, and the time since (on a busy machine,
    // any number of seconds).
    const held =
      /^ {2}paused by ana \(for (?:(\d+) min )?(\d+) s\): v1 API \(troupe resume cli-held lets it go on\)$/m.exec(
        status.stdout,
      );
    expect(held, status.stdout).not.toBeNull();
    const seconds = Number(held?.[1] ?? 0) * 60 + Number(held?.[2]);
    expect(seconds).toBeGreaterThanOrEqual(30);
    expect(seconds).toBeLessThanOrEqual(30 + Math.ceil((Date.now() - seededAt) / 1000));
    expect(JSON.parse(json.stdout)).toMatchObject({
      status: 'running',
      paused: { by: 'ana', reason: 'v1 API' },
    });
    expect(runs.stdout.split('\n').filter((l) => l.includes('cli-'))).toEqual([
      expect.stringMatching(/cli-held\s+paused\s/),
    ]);
    expect(running.stdout).toContain('cli-held');
    expect(running.stdout).toContain('cli-work');
  });

  it('tell with no answer in time prints its key, and told again with --key sends that key', async () => {
    heard.length = 0;
    // Its wait for the answer is short here (10 s by default).
    const slow = await troupe(['tell', 'cli-slow', 'use', 'v2', '--wait', '1'], env);
    expect(slow.code).toBe(1);
    const key = heard[0]?.message.action === 'tell' ? heard[0].message.key : undefined;
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(slow.stderr).toContain('may still have been taken');
    expect(slow.stderr).toContain(`troupe tell cli-slow --key ${key} <message>`);
    expect(slow.stderr).not.toContain('start one with troupe up');
    const again = await troupe(['tell', 'cli-work', 'use', 'v2', '--key', key ?? ''], env);
    expect(again).toMatchObject({ code: 0, stdout: expect.stringContaining('cli-work: told (m-1)') });
    expect(heard[1]?.message).toEqual({ action: 'tell', text: 'use v2', by: expect.any(String), key });
  }, 60_000);
});
