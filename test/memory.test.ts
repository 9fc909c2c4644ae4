import type { EventOf, TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, publishTask, startHarness } from './support/harness.ts';

const results = (events: TroupeEvent[]) =>
  events.filter((e): e is EventOf<'tool.result'> => e.kind === 'tool.result').map((e) => e.data);

describe('memory tools', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('memo.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('shares task memory between agents, keeps long-term memory per agent, and refuses it where not enabled', async () => {
    publishTask(h, 'memo', { id: 'memo-1', goal: 'first' });
    expect((await h.finalOf('memo-1')).kind).toBe('task.completed');
    const [firstRecall, , , plan, othersHabit, listing] = results(h.eventsOf('memo-1'));
    expect(firstRecall).toMatchObject({ ok: false, error: { code: 'not_found' } });
    expect(plan).toMatchObject({ ok: true, output: 'step one' });
    expect(othersHabit).toMatchObject({ ok: false, error: { code: 'denied' } });
    expect(othersHabit?.output).toContain('long-term memory is not enabled for agent reader');
    expect(listing?.output).toBe('plan');

    // The next task starts with an empty task memory, but the writer remembers its habit.
    publishTask(h, 'memo', { id: 'memo-2', goal: 'second' });
    expect((await h.finalOf('memo-2')).kind).toBe('task.completed');
    const [habit] = results(h.eventsOf('memo-2'));
    expect(habit).toMatchObject({ ok: true, output: 'tea' });
  });
});
