import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { BUCKETS, type EventOf, HumanRequest, subjects, WorkflowRecord } from '@troupe/protocol';
import { KvStore, underPrefix } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import {
  facts,
  fixturePath,
  type Harness,
  ofKind,
  publishTask,
  startHarness,
  startSecondCoordinator,
  waitUntil,
} from './support/harness.ts';

describe('approvals and questions for people', () => {
  let h: Harness;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('gated.yaml'),
      fixturePath('hurried.yaml'),
      fixturePath('asker.yaml'),
    ]);
    env = cliEnv({ NATS_URL: h.nats.url });
  });
  afterAll(async () => {
    await h?.stop();
  });

  const requested = async (taskId: string) => {
    await waitUntil(() => ofKind(h.eventsOf(taskId), 'approval.requested').length > 0);
    return ofKind(h.eventsOf(taskId), 'approval.requested')[0] as EventOf<'approval.requested'>;
  };

  it('parks the agent at an ask call until `troupe approve`, then runs that call with the allowed one', async () => {
    publishTask(h, 'gated', { id: 'gate-allow', goal: 'release v1' });
    const ask = await requested('gate-allow');
    expect(ask.data).toMatchObject({ tool: 'write_file', agent: 'executor' });
    expect(ask.data.reason).toContain('ask');
    expect(ask.data.arguments).toContain('release/v1.md');
    // The agent waits: no tool has run, not even the allowed one, and the task is not over.
    expect(ofKind(h.eventsOf('gate-allow'), 'tool.result')).toHaveLength(0);
    await expect(stat(join(h.workspaceRoot, 'gated', 'gate-allow', 'release', 'v1.md'))).rejects.toThrow();

    const listed = await troupe(['approvals'], env);
    expect(listed.stdout).toContain(ask.data.approvalId);
    expect(listed.stdout).toContain('gated/gate-allow');
    // The task's record says what it waits for, as soon as the agent asks (not at the next heartbeat, 5 s on).
    const workflows = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    await expect
      .poll(async () => (await workflows.get('gate-allow'))?.value.activity, { timeout: 4_000 })
      .toMatchObject({
        kind: 'person',
        step: 'work',
        agent: 'executor',
        request: { kind: 'approval', id: ask.data.approvalId },
      });

    const approved = await troupe(['approve', ask.data.approvalId, '--by', 'alice'], env);
    expect(approved.code).toBe(0);
    expect(approved.stdout).toContain(`${ask.data.approvalId}: allowed`);

    const final = await h.finalOf('gate-allow');
    expect(final.kind).toBe('task.completed');
    expect(await readFile(join(h.workspaceRoot, 'gated', 'gate-allow', 'release', 'v1.md'), 'utf8')).toBe(
      'shipped',
    );
    const decided = ofKind(h.eventsOf('gate-allow'), 'approval.decided')[0];
    expect(decided?.data).toMatchObject({ approvalId: ask.data.approvalId, decision: 'allow', by: 'alice' });
    const results = ofKind(h.eventsOf('gate-allow'), 'tool.result').map((r) => [r.data.decision, r.data.ok]);
    expect(results).toEqual([
      ['allow', true],
      ['ask', true],
    ]);
    // The record is closed, so the approval is no longer listed as pending.
    expect((await troupe(['approvals'], env)).stdout).not.toContain(ask.data.approvalId);
  });

  it('ignores a repeated decision, a decision for another id, and a forged one', async () => {
    publishTask(h, 'gated', { id: 'gate-forge', goal: 'release v1' });
    const ask = await requested('gate-forge');
    // A decision for an id nobody waits on reaches no one.
    const forged = await troupe(['approve', 'ap-forged-id'], env);
    expect(forged.code).toBe(1);
    expect(forged.stderr).toContain('no approval named ap-forged-id');
    const raw = await h.client
      .request(
        subjects.approval('gated', 'gate-forge', 'ap-guessed'),
        JSON.stringify({ decision: 'allow' }),
        {
          timeout: 2_000,
        },
      )
      .then(
        () => 'answered',
        (error: Error) => error.message,
      );
    expect(raw).toMatch(/no responders|503/i);
    // A malformed decision on the real subject is refused and leaves the call waiting.
    const bad = await h.client.request(
      subjects.approval('gated', 'gate-forge', ask.data.approvalId),
      '{"decision":"maybe"}',
      {
        timeout: 2_000,
      },
    );
    expect(bad.json()).toMatchObject({ ok: false, error: { code: 'invalid_message' } });
    expect(ofKind(h.eventsOf('gate-forge'), 'approval.decided')).toHaveLength(0);

    expect(
      (await troupe(['deny', ask.data.approvalId, '--reason', 'not on a Friday', '--by', 'bob'], env)).code,
    ).toBe(0);
    expect((await h.finalOf('gate-forge')).kind).toBe('task.completed');
    const again = await troupe(['approve', ask.data.approvalId], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('was already denied by bob; nothing changed');
    expect(ofKind(h.eventsOf('gate-forge'), 'approval.decided')).toHaveLength(1);
  });

  it('sends a denial and its reason back to the model as a tool error', async () => {
    publishTask(h, 'gated', { id: 'gate-deny', goal: 'release v1' });
    const ask = await requested('gate-deny');
    // The reason follows the id, as an answer's text does.
    const denied = await troupe(['deny', ask.data.approvalId, 'release freeze', '--by', 'carol'], env);
    expect(denied.code, denied.stderr).toBe(0);
    expect(denied.stdout).toContain(`${ask.data.approvalId}: denied`);
    expect((await h.finalOf('gate-deny')).kind).toBe('task.completed');
    const release = ofKind(h.eventsOf('gate-deny'), 'tool.result').find((r) => r.data.decision === 'ask');
    expect(release?.data).toMatchObject({ ok: false, error: { code: 'denied' } });
    expect(release?.data.output).toContain('denied by carol: release freeze');
    await expect(stat(join(h.workspaceRoot, 'gated', 'gate-deny', 'release', 'v1.md'))).rejects.toThrow();
  });

  it('denies by default when nobody decides in time', async () => {
    publishTask(h, 'hurried', { id: 'gate-late', goal: 'release v1' });
    const final = await h.finalOf('gate-late');
    expect(final.kind).toBe('task.completed');
    const decided = ofKind(h.eventsOf('gate-late'), 'approval.decided')[0];
    expect(decided?.data).toMatchObject({ decision: 'deny', expired: true, by: 'timeout' });
    const release = ofKind(h.eventsOf('gate-late'), 'tool.result').find((r) => r.data.decision === 'ask');
    expect(release?.data.output).toContain('no decision within 1 s; denied by default');
    const store = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'hurried');
    expect((await store.get(decided?.data.approvalId ?? ''))?.value.status).toBe('expired');
  });

  it('puts an ask_human question to a person and returns the answer to the model', async () => {
    publishTask(h, 'asker', { id: 'ask-1', goal: 'pick a colour' });
    await waitUntil(() => ofKind(h.eventsOf('ask-1'), 'human.asked').length > 0);
    const asked = ofKind(h.eventsOf('ask-1'), 'human.asked')[0] as EventOf<'human.asked'>;
    expect(asked.data.question).toBe('Which colour should the logo be?');
    expect((await troupe(['approvals'], env)).stdout).toContain(`asks: Which colour should the logo be?`);
    const wrong = await troupe(['approve', asked.data.questionId], env);
    expect(wrong.stderr).toContain('is a question: use troupe answer');
    const answered = await troupe(['answer', asked.data.questionId, 'teal', '--by', 'dana'], env);
    expect(answered.code).toBe(0);
    expect((await h.finalOf('ask-1')).kind).toBe('task.completed');
    const result = ofKind(h.eventsOf('ask-1'), 'tool.result').find((r) => r.data.tool === 'ask_human');
    expect(result?.data).toMatchObject({ ok: true, output: 'teal' });
    expect(ofKind(h.eventsOf('ask-1'), 'human.answered')[0]?.data).toMatchObject({
      answer: 'teal',
      by: 'dana',
    });
  });

  it('settles an approval whose decision is written to KV while the agent waits', async () => {
    publishTask(h, 'gated', { id: 'gate-kv', goal: 'release v1' });
    const ask = await requested('gate-kv');
    const store = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'gated');
    const entry = await store.get(ask.data.approvalId);
    if (!entry) throw new Error('no approval record');
    await store.update(
      ask.data.approvalId,
      { ...entry.value, status: 'allowed', by: 'ops-bot', decidedAt: new Date().toISOString() },
      entry.revision,
    );
    expect((await h.finalOf('gate-kv')).kind).toBe('task.completed');
    expect(ofKind(h.eventsOf('gate-kv'), 'approval.decided')[0]?.data).toMatchObject({
      decision: 'allow',
      by: 'ops-bot',
    });
    await stat(join(h.workspaceRoot, 'gated', 'gate-kv', 'release', 'v1.md'));
  });

  // Last: it stops the harness's coordinator.
  it('keeps a question across a restart: answered while nothing waits, the resumed step takes the answer', async () => {
    publishTask(h, 'asker', { id: 'ask-restart', goal: 'pick a colour' });
    await waitUntil(() => ofKind(h.eventsOf('ask-restart'), 'human.asked').length > 0);
    const asked = ofKind(h.eventsOf('ask-restart'), 'human.asked')[0] as EventOf<'human.asked'>;
    await h.coordinator.stop();
    const store = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'asker');
    expect((await store.get(asked.data.questionId))?.value.status).toBe('pending');

    const answered = await troupe(['answer', asked.data.questionId, 'amber', '--by', 'eve'], env);
    expect(answered.stdout).toMatch(/answered \(task .*takes it when its task resumes/);

    const second = await startSecondCoordinator(h, ['asker.yaml']);
    try {
      expect((await h.finalOf('ask-restart', 30_000)).kind).toBe('task.completed');
      const result = ofKind(h.eventsOf('ask-restart'), 'tool.result').find(
        (r) => r.data.tool === 'ask_human',
      );
      expect(result?.data).toMatchObject({ ok: true, output: 'amber' });
      // Asked once: the resumed step waited on the same question.
      expect(ofKind(facts(h.eventsOf('ask-restart')), 'human.asked')).toHaveLength(1);
      expect(ofKind(h.eventsOf('ask-restart'), 'task.resumed')).toHaveLength(1);
    } finally {
      await second.stop();
    }
  });
});
