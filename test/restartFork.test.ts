import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { forkTask, OperationError, readTaskEvents, restartTask } from '@troupe/client';
import { BUCKETS, type EventOf, FINAL_EVENT_KINDS, subjects, type WorkflowRecord } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import { ofKind, waiter } from './support/harness.ts';
import { type ModelPipeline, startModelPipeline } from './support/modelPipeline.ts';
import { type KillTestServer, startKillTestServer } from './support/natsUsers.ts';
import { type UpProcesses, upProcesses } from './support/upProcesses.ts';

/**
 * Issue 32, items 3 and 4: a failed task restarted from its failing step, and forked with an earlier output edited,
 * run as new tasks linked to it; the steps before run none of their model or tool calls again (the fake model server
 * counts every call), even when the coordinator running the new task is killed with SIGKILL.
 */
describe('restart and fork', () => {
  let relay3: ModelPipeline;
  let openai: ModelPipeline['openai'];
  let file: string;
  let server: KillTestServer;
  let bus: NatsBus;
  let coordinators: UpProcesses;
  const { notify, waitFor: until } = waiter();
  const env = () => cliEnv({ OPENAI_API_KEY: 'sk-test' });

  beforeAll(async () => {
    relay3 = await startModelPipeline(
      'relay3',
      `agents:
  planner:
    instructions: Plan it.
    tools: [run_command]
    permissions: [{ tool: run_command, decision: allow, commands: [echo] }]
  builder:
    instructions: Build it.
    tools: [run_command]
    permissions: [{ tool: run_command, decision: allow, commands: [echo] }]
  checker: { instructions: Check it. }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: build, kind: agent, agent: builder }
  - { id: check, kind: agent, agent: checker }
`,
    );
    ({ openai, file } = relay3);
    server = await startKillTestServer(file, false, 'family-test', notify);
    coordinators = upProcesses(file, server.nats.url, join(relay3.dir, 'home'), env());
    bus = await NatsBus.connect({
      servers: server.nats.url,
      name: 'family-test-bus',
      logger: createLogger({ level: 'silent' }),
    });
  }, 60_000);
  afterAll(async () => {
    await coordinators?.stopAll('SIGKILL');
    await bus?.close();
    await server?.stop();
    await relay3?.stop();
  });

  const up = () => coordinators.up();
  const cli = (...args: string[]) => troupe([...args, '--server', server.nats.url], env(), 60_000);
  const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
  const finalOf = (taskId: string) =>
    until(() => eventsOf(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind)), `${taskId} to end`, 60_000);
  const recordOf = async (taskId: string) =>
    (await (await new Kvm(server.client).open(BUCKETS.workflows)).get(taskId))?.json<WorkflowRecord>();
  /** The model calls and tool calls of some steps of a task, as its events in EVENTS say. */
  const callsOf = async (taskId: string, steps: string[]) => {
    const stored = await readTaskEvents(bus, taskId, 'relay3');
    const of = (stepId: string) => steps.some((s) => stepId.startsWith(`${taskId}.${s}.`));
    return {
      model: ofKind(stored, 'llm.request').filter((e) => of(e.data.stepId)).length,
      tool: ofKind(stored, 'tool.call').filter((e) => of(e.data.stepId)).length,
      stored,
    };
  };
  const newTaskOf = (stdout: string) => /^(\S+): (restart|fork) of/.exec(stdout)?.[1] ?? '';

  it('a failed task restarted from the failed step runs only that step: no earlier model or tool call again', async () => {
    await up();
    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'run_command', arguments: '{"command":"echo plan"}' }] },
      { kind: 'message', content: 'the plan: three parts' },
      { kind: 'message', toolCalls: [{ name: 'run_command', arguments: '{"command":"echo build"}' }] },
      { kind: 'message', content: 'the build: done' },
      { kind: 'error', status: 400, message: 'the checker model refused' },
    );
    server.client.publish(subjects.task('relay3'), JSON.stringify({ id: 'orig-1', goal: 'ship v2' }));
    expect((await finalOf('orig-1')).kind).toBe('task.failed');
    expect(await callsOf('orig-1', ['plan', 'build'])).toMatchObject({ model: 4, tool: 2 });
    const before = openai.requests.length;

    openai.enqueue({ kind: 'message', content: 'all checked' });
    const restarted = await cli('restart', 'orig-1', '--from', 'check', '--by', 'ann');
    expect(restarted.stderr).toBe('');
    expect(restarted.code).toBe(0);
    const taskId = newTaskOf(restarted.stdout);
    expect(taskId).not.toBe('');
    const final = await finalOf(taskId);
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'all checked' } });

    // One model call, the checker's; the planner's and builder's model and tool calls were not made again.
    expect(openai.requests.length - before).toBe(1);
    const calls = await callsOf(taskId, ['plan', 'build']);
    expect([calls.model, calls.tool]).toEqual([0, 0]);
    expect(relay3.sent(before)).toContain('the build: done');
    const reused = ofKind(calls.stored, 'step.completed').filter((e) => e.data.reused);
    expect(reused.map((e) => [e.data.step, e.data.output, e.data.usage.modelCalls])).toEqual([
      ['plan', 'the plan: three parts', 0],
      ['build', 'the build: done', 0],
    ]);
    // The new task names its origin in its task.accepted, its record, its trace and troupe runs; the original is as it ended.
    const accepted = ofKind(calls.stored, 'task.accepted')[0] as EventOf<'task.accepted'>;
    expect(accepted.data).toMatchObject({
      goal: 'ship v2',
      origin: { taskId: 'orig-1', kind: 'restart', step: 'check', by: 'ann' },
    });
    const record = await recordOf(taskId);
    expect(record?.origin).toEqual({ taskId: 'orig-1', kind: 'restart', step: 'check', by: 'ann' });
    expect(record?.version).toBe((await recordOf('orig-1'))?.version);
    expect((await recordOf('orig-1'))?.status).toBe('failed');
    expect(final.data).toMatchObject({ usage: { modelCalls: 1 } });
    const trace = await cli('trace', taskId);
    expect(trace.stdout).toContain('origin: restart of task orig-1 from check by ann');
    expect(trace.stdout).toMatch(/plan · planner · round 1 · reused/);
    // Replayed offline, it takes the same outputs from its own record and runs only the checker again.
    const replay = await cli('replay', taskId, '--pipeline', file, '--no-tools');
    expect(replay.stderr + replay.stdout).not.toMatch(/differ|diverge/i);
    expect(replay.code).toBe(0);
    const runs = await cli('runs', '--family', taskId);
    expect(runs.stdout).toMatch(/ORIGIN/);
    expect(runs.stdout).toMatch(new RegExp(`${taskId}.*restart of orig-1 from check`));
    expect(runs.stdout).toMatch(/orig-1 .*failed/);
  });

  it('a fork that edits an earlier output runs on from its step, which sees the edit', async () => {
    const before = openai.requests.length;
    openai.enqueue(
      { kind: 'message', content: 'built from the better plan' },
      { kind: 'message', content: 'ok' },
    );
    const forked = await cli('fork', 'orig-1', '--at', 'build', '--set', 'steps.plan.output=a better plan');
    expect(forked.code).toBe(0);
    const taskId = newTaskOf(forked.stdout);
    expect((await finalOf(taskId)).kind).toBe('task.completed');
    expect(openai.requests.length - before).toBe(2);
    // The builder was sent the edited plan, not the original's.
    expect(relay3.sent(before)).toContain('a better plan');
    expect(relay3.sent(before)).not.toContain('the plan: three parts');
    expect(await callsOf(taskId, ['plan'])).toMatchObject({ model: 0, tool: 0 });
    expect((await recordOf(taskId))?.origin).toMatchObject({
      kind: 'fork',
      step: 'build',
      edited: ['steps.plan.output'],
    });
    const runs = await cli('runs', '--family', 'orig-1');
    expect(runs.stdout).toMatch(/fork of orig-1 at build \(edited steps\.plan\.output\)/);
  });

  it('refuses an unknown task, a step it never started, a set for a step not reused, and a completed task to restart', async () => {
    const unknown = await cli('restart', 'never-was', '--from', 'check');
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('no task never-was is known');
    const step = await cli('restart', 'orig-1', '--from', 'deploy');
    expect(step.code).toBe(1);
    expect(step.stderr).toContain(
      'cannot restart task orig-1: pipeline relay3 has no step "deploy"; its steps: plan, build, check',
    );
    // A step the pipeline has, which the task ended before reaching.
    openai.enqueue({ kind: 'error', status: 400, message: 'no plan today' });
    server.client.publish(subjects.task('relay3'), JSON.stringify({ id: 'early-1', goal: 'ship v3' }));
    expect((await finalOf('early-1')).kind).toBe('task.failed');
    const unreached = await cli('restart', 'early-1', '--from', 'check');
    expect(unreached.code).toBe(1);
    expect(unreached.stderr).toContain(
      'step "check" never started in task early-1; its steps that started: plan',
    );
    const set = await cli('fork', 'orig-1', '--at', 'build', '--set', 'steps.check.output=x');
    expect(set.code).not.toBe(0);
    expect(set.stderr).toMatch(/cannot set the output of step "check".*reused: plan/);
    const badSet = await cli('fork', 'orig-1', '--at', 'build', '--set', 'plan=x');
    expect(badSet.code).toBe(2);
    expect(badSet.stderr).toContain('--set takes steps.<step id>.output=<text>');
    const completed = (await recordOf('orig-1')) && ofKind(server.events, 'task.completed')[0]?.taskId;
    const again = await cli('restart', String(completed), '--from', 'check');
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('completed; nothing to restart');
    // Published straight to NATS, past the client's checks: the coordinator fails the new task, saying why.
    const bad = [
      [
        'bad-1',
        { taskId: 'never-was', kind: 'restart', step: 'check' },
        'cannot restart task never-was: no such task is known',
      ],
      [
        'bad-2',
        { taskId: 'orig-1', kind: 'fork', step: 'deploy' },
        'cannot fork task orig-1: step "deploy" never started',
      ],
    ] as const;
    for (const [id, origin] of bad)
      server.client.publish(subjects.task('relay3'), JSON.stringify({ id, goal: 'ship v2', origin }));
    for (const [id, , message] of bad) {
      expect(await finalOf(id)).toMatchObject({
        kind: 'task.failed',
        data: { message: expect.stringContaining(message) },
      });
    }
    await expect(restartTask(bus, 'never-was', { from: 'check' })).rejects.toSatisfy((e) =>
      OperationError.is(e, 'not_found'),
    );
    await expect(forkTask(bus, 'orig-1', { at: 'nowhere' })).rejects.toSatisfy((e) =>
      OperationError.is(e, 'invalid_request'),
    );
  });

  it('a restart whose coordinator is killed mid-run resumes and still reuses exactly; a running task is not restarted', async () => {
    const before = openai.requests.length;
    // The checker's first call is slow: the coordinator is killed during it; the next coordinator calls again.
    openai.enqueue(
      { kind: 'message', content: 'too late', delayMs: 5_000 },
      { kind: 'message', content: 'checked after the crash' },
    );
    const { taskId } = await restartTask(bus, 'orig-1', { from: 'check' });
    await until(
      () => ofKind(eventsOf(taskId), 'llm.request').find((e) => e.data.stepId.startsWith(`${taskId}.check.`)),
      'the check step to call its model',
    );
    // Killed once the call reached the model server, not only once the task said it would make it.
    await vi.waitFor(() => expect(openai.requests.length - before).toBe(1), { timeout: 10_000 });
    await expect(restartTask(bus, taskId, { from: 'check' })).rejects.toSatisfy(
      (e) => OperationError.is(e, 'conflict') && /still running/.test((e as Error).message),
    );
    await coordinators.stopAll('SIGKILL');
    await up();
    const final = await finalOf(taskId);
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'checked after the crash' } });
    // The two checker calls, and nothing of the steps it reused, across the crash.
    expect(openai.requests.length - before).toBe(2);
    const calls = await callsOf(taskId, ['plan', 'build']);
    expect([calls.model, calls.tool]).toEqual([0, 0]);
    expect(ofKind(calls.stored, 'task.resumed')).toHaveLength(1);
    expect(
      ofKind(calls.stored, 'step.completed')
        .filter((e) => e.data.reused)
        .map((e) => e.data.step),
    ).toEqual(['plan', 'build']);
  });

  it('runs on the version the original ran on, or with --newest on the one new tasks start on', async () => {
    const original = (await recordOf('orig-1'))?.version;
    await writeFile(file, (await readFile(file, 'utf8')).replace('Check it.', 'Check it twice.'));
    await coordinators.stopAll('SIGTERM');
    await up();
    const systemOf = (index: number) =>
      JSON.stringify(
        (openai.requests[index]?.body as { messages?: unknown[] } | undefined)?.messages?.[0] ?? '',
      );

    let before = openai.requests.length;
    openai.enqueue({ kind: 'message', content: 'checked on the old version' });
    const onOriginal = newTaskOf((await cli('restart', 'orig-1', '--from', 'check')).stdout);
    expect((await finalOf(onOriginal)).kind).toBe('task.completed');
    expect((await recordOf(onOriginal))?.version).toBe(original);
    expect(systemOf(before)).not.toContain('Check it twice.');

    before = openai.requests.length;
    openai.enqueue({ kind: 'message', content: 'checked on the new version' });
    const onNewest = newTaskOf((await cli('restart', 'orig-1', '--from', 'check', '--newest')).stdout);
    expect((await finalOf(onNewest)).kind).toBe('task.completed');
    const record = await recordOf(onNewest);
    expect(record?.version).not.toBe(original);
    expect(record?.origin).toMatchObject({ newest: true });
    expect(systemOf(before)).toContain('Check it twice.');
    // The steps before it were still reused: one model call, the checker's.
    expect(openai.requests.length - before).toBe(1);
  });

  it("checks a restart's or fork's input against the schema of the version it runs on, not the newest's", async () => {
    const original = (await recordOf('orig-1'))?.version;
    // A newer version asks every task for a ticket; orig-1 had none, and its version asked for none.
    const schema =
      'input:\n  type: object\n  properties: { ticket: { type: string } }\n  required: [ticket]\n';
    await writeFile(file, (await readFile(file, 'utf8')).replace('agents:\n', `${schema}agents:\n`));
    await coordinators.stopAll('SIGTERM');
    await up();

    openai.enqueue({ kind: 'message', content: 'checked without a ticket' });
    const restarted = await cli('restart', 'orig-1', '--from', 'check');
    expect(restarted.stderr).toBe('');
    const onOriginal = newTaskOf(restarted.stdout);
    expect((await finalOf(onOriginal)).kind).toBe('task.completed');
    expect((await recordOf(onOriginal))?.version).toBe(original);
    // On the newest version the input must have its ticket; a fork's new input is checked against its version too.
    const newest = await cli('restart', 'orig-1', '--from', 'check', '--newest');
    expect(newest.code).toBe(1);
    expect(newest.stderr).toContain('ticket');
    openai.enqueue({ kind: 'message', content: 'checked with a ticket' });
    const forked = await cli('fork', 'orig-1', '--at', 'check', '--newest', '--input', '{"ticket":"T-9"}');
    expect((await finalOf(newTaskOf(forked.stdout))).kind).toBe('task.completed');
  });
});
