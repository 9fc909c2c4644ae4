import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { submitTask } from '@troupe/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
} from './support/harness.ts';

describe('a YAML pipeline over a real nats-server', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml'), fixturePath('escape.yaml'), fixturePath('slow.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('runs a task published by a plain NATS client through plan, a rejected round and an approval', async () => {
    publishTask(h, 'demo', { id: 'plain-1', goal: 'Write a hello note' });
    const final = await h.finalOf('plain-1');
    expect(final.kind).toBe('task.completed');

    const flow = h
      .eventsOf('plain-1')
      .filter((e) => ['task.accepted', 'agent.handoff', 'step.completed', 'task.completed'].includes(e.kind))
      .map((e) =>
        e.kind === 'step.completed'
          ? `${e.kind}:${e.data.step}:${e.data.verdict?.decision ?? 'ok'}`
          : `${e.kind}:${e.from}>${e.to}`,
      );
    expect(flow).toEqual([
      'task.accepted:user>demo',
      'agent.handoff:task>planner',
      'step.completed:plan:ok',
      'agent.handoff:planner>executor',
      'step.completed:execute:ok',
      'agent.handoff:executor>reviewer',
      'step.completed:review:reject',
      'agent.handoff:reviewer>executor',
      'step.completed:execute:ok',
      'agent.handoff:executor>reviewer',
      'step.completed:review:approve',
      'task.completed:workflow>user',
    ]);
    if (final.kind !== 'task.completed') return;
    expect(final.data.rounds).toBe(2);
    expect(final.data.output).toContain('sign-off');
    expect(Object.keys(final.data.usageByAgent).sort()).toEqual(['executor', 'planner', 'reviewer']);
    // The usage in task.completed is the sum of what every model call reported.
    const responses = h.eventsOf('plain-1').filter((e) => e.kind === 'llm.response');
    const reported = responses.reduce(
      (n, e) => n + (e.kind === 'llm.response' ? e.data.usage.outputTokens : 0),
      0,
    );
    expect(final.data.usage.outputTokens).toBe(reported);
    expect(final.data.usage.modelCalls).toBe(responses.length);
    // Every event of the task carries the same trace.
    expect(new Set(h.eventsOf('plain-1').map((e) => e.traceparent.split('-')[1])).size).toBe(1);
  });

  it("lets the executor's write_file really write into the task workspace", async () => {
    publishTask(h, 'demo', { id: 'files-1', goal: 'Write a hello note' });
    expect((await h.finalOf('files-1')).kind).toBe('task.completed');
    const note = await readFile(join(h.workspaceRoot, 'demo', 'files-1', 'notes', 'hello.md'), 'utf8');
    expect(note).toContain('# Hello from Troupe');
    expect(note).toContain('— reviewed and approved by the reviewer agent');
    const writes = h
      .eventsOf('files-1')
      .filter((e) => e.kind === 'tool.result' && e.data.tool === 'write_file');
    expect(writes.map((e) => e.kind === 'tool.result' && e.data.ok)).toEqual([true, true]);
  });

  it('runs two tasks at once without mixing their events or workspaces', async () => {
    publishTask(h, 'slow', { id: 'par-a', goal: 'task A' });
    publishTask(h, 'slow', { id: 'par-b', goal: 'task B' });
    const [a, b] = await Promise.all([h.finalOf('par-a'), h.finalOf('par-b')]);
    expect([a.kind, b.kind]).toEqual(['task.completed', 'task.completed']);

    // They overlapped: each started before the other finished.
    const index = (taskId: string, kind: string) =>
      h.events.findIndex((e) => e.taskId === taskId && e.kind === kind);
    expect(index('par-b', 'step.started')).toBeLessThan(index('par-a', 'task.completed'));
    expect(index('par-a', 'step.started')).toBeLessThan(index('par-b', 'task.completed'));

    for (const [taskId, goal] of [
      ['par-a', 'task A'],
      ['par-b', 'task B'],
    ] as const) {
      const events = h.eventsOf(taskId);
      expect(events.every((e) => e.taskId === taskId)).toBe(true);
      const stepIds = events.flatMap((e) => ('stepId' in e.data ? [String(e.data.stepId)] : []));
      expect(stepIds.every((id) => id.startsWith(`${taskId}.`))).toBe(true);
      expect(events.find((e) => e.kind === 'task.accepted')?.data).toMatchObject({ goal });
      expect(await readFile(join(h.workspaceRoot, 'slow', taskId, 'result.md'), 'utf8')).toBe('done');
    }
  });

  it('does not run a resubmitted task id twice', async () => {
    publishTask(h, 'demo', { id: 'dup-1', goal: 'first' });
    expect((await h.finalOf('dup-1')).kind).toBe('task.completed');
    const before = h.eventsOf('dup-1').length;

    // Again, as a new stream message (a plain publish has no Nats-Msg-Id, so the stream stores it) …
    publishTask(h, 'demo', { id: 'dup-1', goal: 'second' });
    // … and twice through JetStream with the id as Nats-Msg-Id: stored once, then dropped by the server.
    const stored = await submitTask(h.bus, 'demo', { id: 'dup-1', goal: 'third' });
    const dropped = await submitTask(h.bus, 'demo', { id: 'dup-1', goal: 'fourth' });
    expect(stored.duplicate).toBe(false);
    expect(dropped.duplicate).toBe(true);
    // A later task finishing shows the duplicates were consumed before it.
    publishTask(h, 'demo', { id: 'dup-after', goal: 'after' });
    expect((await h.finalOf('dup-after')).kind).toBe('task.completed');
    await new Promise((r) => setTimeout(r, 300));

    expect(h.eventsOf('dup-1').length).toBe(before);
    expect(kinds(h.eventsOf('dup-1')).filter((k) => k === 'task.accepted')).toHaveLength(1);
  });

  it('reports malformed tasks on troupe.events._invalid and keeps processing good ones', async () => {
    publishTask(h, 'demo', 'this is not json');
    const notJson = await h.nextInvalid(
      (e) => e.subject === 'troupe.tasks.demo' && e.reason.includes('not JSON'),
    );
    expect(notJson.reporter).toBe('coordinator');
    expect(notJson.payload).toBe('this is not json');

    publishTask(h, 'demo', { input: { a: 1 } });
    const noGoal = await h.nextInvalid(
      (e) => e.subject === 'troupe.tasks.demo' && e.issues.some((i) => i.path === 'goal'),
    );
    expect(noGoal.pipeline).toBe('demo');

    publishTask(h, 'demo', { goal: 'typo', metdata: {} });
    const typo = await h.nextInvalid((e) => e.reason.includes('metdata'));
    expect(typo.subject).toBe('troupe.tasks.demo');

    publishTask(h, 'nope', { goal: 'x' });
    const unknown = await h.nextInvalid((e) => e.subject === 'troupe.tasks.nope');
    expect(unknown.reason).toContain('no pipeline named "nope"');
    expect(unknown.reason).toContain('demo');

    publishTask(h, 'nope', 'not json either');
    const unknownGarbage = await h.nextInvalid((e) => e.payload === 'not json either');
    expect(unknownGarbage.reason).toContain('no pipeline named "nope"');

    publishTask(h, 'demo', { id: 'after-bad', goal: 'still works' });
    expect((await h.finalOf('after-bad')).kind).toBe('task.completed');
    // Each bad message was reported once, not once per process that saw it.
    expect(h.invalid.filter((e) => e.payload === 'this is not json')).toHaveLength(1);
    expect(h.invalid.filter((e) => e.payload === 'not json either')).toHaveLength(1);
  });

  it('reports a malformed agent step, and answers a malformed step request with an error', async () => {
    h.client.publish('troupe.agents.demo.executor', JSON.stringify({ stepId: 'x' }));
    const report = await h.nextInvalid((e) => e.subject === 'troupe.agents.demo.executor');
    expect(report.reporter).toContain('executor');
    expect(report.issues.map((i) => i.path)).toContain('taskId');

    const reply = await h.client.request('troupe.agents.demo.executor', '{"nope":', { timeout: 5_000 });
    expect(reply.json()).toMatchObject({ ok: false, error: { code: 'invalid_message' } });
  });

  it('refuses a path escape by the model, tells the model, and the task goes on', async () => {
    publishTask(h, 'escape', { id: 'esc-1', goal: 'write a file' });
    const final = await h.finalOf('esc-1');
    expect(final.kind).toBe('task.completed');

    const results = h.eventsOf('esc-1').flatMap((e) => (e.kind === 'tool.result' ? [e.data] : []));
    const [relative, absolute, undeclared, inside] = results;
    expect(relative).toMatchObject({
      tool: 'write_file',
      ok: false,
      error: { code: 'path_outside_workspace' },
    });
    expect(relative?.output).toContain('outside the workspace');
    expect(absolute).toMatchObject({
      tool: 'write_file',
      ok: false,
      error: { code: 'path_outside_workspace' },
    });
    expect(undeclared).toMatchObject({ tool: 'read_file', ok: false });
    expect(undeclared?.output).toContain('not declared');
    expect(inside).toMatchObject({ tool: 'write_file', ok: true });

    // The refusals went back to the model: its next request carried the three tool results.
    const requests = h
      .eventsOf('esc-1')
      .flatMap((e) => (e.kind === 'llm.request' && e.data.agent === 'executor' ? [e.data] : []));
    expect(requests[1]?.messages).toBe(requests[0] ? requests[0].messages + 4 : -1);

    await expect(stat(join(h.workspaceRoot, '..', 'escape.txt'))).rejects.toThrow();
    await expect(stat('/tmp/troupe-escape-absolute.txt')).rejects.toThrow();
    expect(await readFile(join(h.workspaceRoot, 'escape', 'esc-1', 'inside.md'), 'utf8')).toBe('fine');
  });
});
