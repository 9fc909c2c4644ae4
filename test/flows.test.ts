import { replyToHuman, submitTask } from '@troupe/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePath, fixturePath, type Harness, kinds, ofKind, startHarness } from './support/harness.ts';

/** examples/triage.yaml over a real NATS: a route, a parallel step and a conditional step, end to end. */
describe('a flow beyond a line', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([
      examplePath('triage.yaml'),
      examplePath('fanout.yaml'),
      fixturePath('confirming.yaml'),
      fixturePath('routed.yaml'),
      fixturePath('misrouted.yaml'),
    ]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('routes a feature to the build, builds code and docs at once, and announces the risky change', async () => {
    await submitTask(h.bus, 'triage', { id: 'triage-1', goal: 'Add an export command' });
    const final = await h.finalOf('triage-1');
    expect(final).toMatchObject({
      kind: 'task.completed',
      data: { output: 'Built the export feature (code and docs) and announced it as a risky change.' },
    });
    const events = h.eventsOf('triage-1');
    expect(ofKind(events, 'route.chosen')[0]?.data).toMatchObject({
      step: 'triage',
      value: 'feature',
      target: 'build',
    });
    // The fixer was routed around; both branches ran; the risky change was announced.
    expect(
      ofKind(events, 'step.started')
        .map((e) => e.data.step)
        .sort(),
    ).toEqual(['announce', 'classify', 'code', 'docs', 'summarize'].sort());
    expect(ofKind(events, 'branches.joined')[0]?.data).toMatchObject({
      step: 'build',
      join: 'all',
      ok: true,
    });
    expect(kinds(events)).not.toContain('step.skipped');
    expect(ofKind(events, 'step.completed').every((e) => e.data.ok)).toBe(true);
  });

  it('builds each part of the plan in a workflow of its own, checks the risky one, and summarizes them all', async () => {
    await submitTask(h.bus, 'fanout', { id: 'fanout-1', goal: 'Add sync to the notes app' });
    const final = await h.finalOf('fanout-1');
    expect(final).toMatchObject({
      kind: 'task.completed',
      data: { output: 'Built the parser, storage and cli parts; the risky storage part was checked.' },
    });
    const events = h.eventsOf('fanout-1');
    const startedFor = (step: string) =>
      ofKind(events, 'step.started')
        .filter((e) => e.data.step === step)
        .map((e) => e.data.item)
        .sort();
    expect(startedFor('build')).toEqual([0, 1, 2]);
    // Only the risky part (the second) was checked; the others skipped the check.
    expect(startedFor('check')).toEqual([1]);
    expect(
      ofKind(events, 'step.skipped')
        .map((e) => e.data.item)
        .sort(),
    ).toEqual([0, 2]);
    expect(ofKind(events, 'items.joined')[0]?.data).toMatchObject({
      step: 'build-each',
      items: 3,
      completed: 3,
      failed: [],
      ok: true,
    });
    // The summarizer got every part's result, in the plan's order.
    const summarize = ofKind(events, 'step.completed').find((e) => e.data.step === 'summarize');
    expect(summarize?.data.ok).toBe(true);
    const items = ofKind(events, 'step.completed').filter((e) => e.data.step === 'build');
    expect(new Set(items.map((e) => e.data.stepId)).size).toBe(3);
  });

  /** The questions a task has been asked so far. */
  const questions = (taskId: string) => ofKind(h.eventsOf(taskId), 'human.asked');
  const answer = (id: string, text: string) =>
    replyToHuman(h.bus, id, { kind: 'question', answer: { answer: text, by: 'ana' } });
  const asked = async (taskId: string, count: number) => {
    await expect.poll(() => questions(taskId).length, { timeout: 30_000 }).toBe(count);
    return questions(taskId)[count - 1]?.data.questionId as string;
  };

  it('asks a person mid-flow, asks again when the answer misses the schema, and goes on with the answer', async () => {
    await submitTask(h.bus, 'confirming', { id: 'confirm-1', goal: 'Release 1.2' });
    const first = await asked('confirm-1', 1);
    expect(questions('confirm-1')[0]?.data.question).toBe('Ship the draft?');
    await answer(first, 'sure');
    const second = await asked('confirm-1', 2);
    expect(questions('confirm-1')[1]?.data.question).toContain('Your last answer could not be used');
    await answer(second, '{"ship": true}');
    const final = await h.finalOf('confirm-1');
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Release is shipped.' } });
    const answered = ofKind(h.eventsOf('confirm-1'), 'human.answered').map((e) => e.data.answer);
    expect(answered).toEqual(['sure', '{"ship": true}']);
  });

  it('skips what the answer rules out', async () => {
    await submitTask(h.bus, 'confirming', { id: 'confirm-2', goal: 'Release 1.3' });
    await answer(await asked('confirm-2', 1), '{"ship": false}');
    const final = await h.finalOf('confirm-2');
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: '{"ship":false}' } });
    expect(ofKind(h.eventsOf('confirm-2'), 'step.skipped').map((e) => e.data.step)).toEqual(['ship']);
  });

  it('lets a router agent pick the target, repairing a target that does not exist, and says why it chose', async () => {
    await submitTask(h.bus, 'routed', { id: 'routed-1', goal: 'Add an export command' });
    expect(await h.finalOf('routed-1')).toMatchObject({
      kind: 'task.completed',
      data: { output: 'Built the export command.' },
    });
    const events = h.eventsOf('routed-1');
    expect(ofKind(events, 'route.chosen')[0]?.data).toMatchObject({
      step: 'pick',
      target: 'build',
      agent: 'picker',
      reason: 'a new export command is a feature',
    });
    // Two model calls: the miss, and the repair.
    expect(ofKind(events, 'llm.response').filter((e) => e.data.agent === 'picker')).toHaveLength(2);
    expect(ofKind(events, 'step.started').map((e) => e.data.step)).toEqual(['pick', 'build']);
  });

  it('fails a router that keeps naming a target that does not exist, saying so', async () => {
    await submitTask(h.bus, 'misrouted', { id: 'misrouted-1', goal: 'Sort this out' });
    const final = await h.finalOf('misrouted-1');
    expect(final).toMatchObject({ kind: 'task.failed', data: { reason: 'invalid_output', step: 'pick' } });
    expect((final.data as { message: string }).message).toContain(
      'step pick (stubborn) failed: agent stubborn: the reply does not match the required output "pick_route" after 1 repair turn(s); target: Invalid option: expected one of "fix"|"end"',
    );
    expect(ofKind(h.eventsOf('misrouted-1'), 'step.started').map((e) => e.data.step)).toEqual(['pick']);
  });
});

/** A foreach step whose items each wait on a person, with one working slot for the whole coordinator. */
describe('a foreach step whose items ask people', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('polled.yaml'), examplePath('fanout.yaml')], { concurrency: 1 });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('asks one question per item, naming the item, holds no slot while they wait, and takes each answer', async () => {
    await submitTask(h.bus, 'polled', {
      id: 'poll-1',
      goal: 'Agree on the plan',
      input: { people: ['ana', 'bo'] },
    });
    const questions = () => ofKind(h.eventsOf('poll-1'), 'human.asked');
    await expect.poll(() => questions().length, { timeout: 30_000 }).toBe(2);
    expect(
      questions()
        .map((q) => q.data.question)
        .sort(),
    ).toEqual([
      'Do you agree?\n\n(item 0 of ask-each: "ana")',
      'Do you agree?\n\n(item 1 of ask-each: "bo")',
    ]);
    // The only slot is free while both items wait: another task runs to its end meanwhile.
    await submitTask(h.bus, 'fanout', { id: 'meanwhile', goal: 'Add sync' });
    expect(await h.finalOf('meanwhile')).toMatchObject({ kind: 'task.completed' });
    const [first, second] = questions().sort((a, b) =>
      String(a.data.question).localeCompare(String(b.data.question)),
    );
    await replyToHuman(h.bus, first?.data.questionId as string, {
      kind: 'question',
      answer: { answer: 'yes', by: 'ana' },
    });
    await replyToHuman(h.bus, second?.data.questionId as string, {
      kind: 'question',
      answer: { answer: 'no', by: 'bo' },
    });
    expect(await h.finalOf('poll-1')).toMatchObject({ kind: 'task.completed', data: { output: 'tallied' } });
    const votes = ofKind(h.eventsOf('poll-1'), 'step.completed').filter((e) => e.data.step === 'vote');
    expect(votes.map((e) => [e.data.item, e.data.output]).sort()).toEqual([
      [0, 'yes'],
      [1, 'no'],
    ]);
  });
});
