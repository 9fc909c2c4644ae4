import { describe, expect, it } from 'vitest';
import { PeopleInFlight } from '../../src/workflow/peopleInFlight.ts';
import type { HumanRunOutput } from '../../src/workflow/workflowTypes.ts';

/** A run of a human step that ends when the test says, with the answer it is given. */
function runByHand() {
  let end: (output: HumanRunOutput) => void = () => {};
  const run = () =>
    new Promise<HumanRunOutput>((resolve) => {
      end = resolve;
    });
  return { run, end: (answer: string) => end({ ok: true, answer, durationMs: 0 }) };
}

const heard = (signal: AbortSignal) => ({ signal, report: () => {}, leave: () => {} });

describe('PeopleInFlight', () => {
  it('keeps only the newest run of a step: an earlier one still ending is neither woken for nor adopted', async () => {
    const people = new PeopleInFlight();
    const woken: string[] = [];
    people.onMustHear = (taskId) => woken.push(taskId);
    // The step's first run: its actor was stopped (a cancel, a restart of the step), its run still ending.
    const first = runByHand();
    const firstActor = new AbortController();
    people.start('t-1', 'ask', heard(firstActor.signal), first.run).catch(() => {});
    firstActor.abort(new Error('stopped'));
    // The step runs again, and its task is passivated while the first run has not ended yet.
    const second = runByHand();
    people.start('t-1', 'ask', heard(new AbortController().signal), second.run).catch(() => {});
    expect(people.size).toBe(1);
    people.detach('t-1');
    first.end('late');
    await Promise.resolve();
    // The first run's end is its own actor's: it wakes nobody, and the restored step adopts the run under way.
    expect(woken).toEqual([]);
    const adopted = people.adopt('t-1', 'ask', new AbortController().signal, () => {});
    second.end('yes');
    await expect(adopted).resolves.toMatchObject({ answer: 'yes' });
    expect(people.size).toBe(0);
  });
});
