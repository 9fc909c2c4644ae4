import type { Clock, HumanGate, HumanScope, StepJournal } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { HOUR, ok, pipeline, setUp, startRunner } from './support/steeringRunner.ts';

const askFirst = pipeline([
  { id: 'ask', kind: 'human', prompt: 'Ship it?', timeout: 60 },
  { id: 'build', kind: 'agent', agent: 'builder' },
]);

/**
 * People played by the test, whose questions outlive a coordinator as the NATS gate's do (in KV): a question asked
 * again by id (`options.id`) is the same question, answered, still open, or expired at once.
 */
function people(clock: Clock) {
  type Question = {
    id: string;
    timeoutMs: number | undefined;
    state: 'open' | 'expired' | 'answered';
    answer?: string;
  };
  const asked: Question[] = [];
  const waiters = new Map<string, { resolve: (text: string) => void; reject: (error: Error) => void }>();
  const ids = new Map<string, string>();
  const journal = {
    humanRequest: async (key: string) => ids.get(key),
    recordHumanRequest: async (key: string, id: string) => void ids.set(key, id),
  } as unknown as StepJournal;
  const expired = (id: string) =>
    Object.assign(new Error(`nobody answered (question ${id})`), { code: 'timeout' });
  const gate: HumanGate = {
    approve: async () => ({ decision: 'deny', reason: 'not asked' }),
    ask: (_prompt: string, scope: HumanScope, signal: AbortSignal, options) =>
      new Promise<string>((resolve, reject) => {
        let question = options?.id === undefined ? undefined : asked.find((q) => q.id === options.id);
        if (question?.state === 'answered') return resolve(question.answer as string);
        if (question?.state === 'expired') return reject(expired(question.id));
        if (!question) {
          question = { id: `q${asked.length + 1}`, timeoutMs: scope.timeoutMs, state: 'open' };
          asked.push(question);
          void options?.onAsked?.(question.id);
          const open = question;
          clock.setTimeout(() => {
            if (open.state !== 'open') return;
            open.state = 'expired';
            waiters.get(open.id)?.reject(expired(open.id));
          }, scope.timeoutMs ?? HOUR);
        }
        waiters.set(question.id, { resolve, reject });
        signal.addEventListener('abort', () =>
          reject(Object.assign(new Error('cancelled'), { code: 'cancelled' })),
        );
      }),
  };
  const answer = (id: string, text: string) => {
    const question = asked.find((q) => q.id === id);
    if (question?.state !== 'open') throw new Error(`question ${id} is not open`);
    question.state = 'answered';
    question.answer = text;
    waiters.get(id)?.resolve(text);
  };
  return { gate, journal, asked, answer };
}

describe('a human step whose question expired while its task was paused, restored still paused', () => {
  it('is not failed by the expiry: the question is asked again once the task is resumed, once', async () => {
    let runner: Awaited<ReturnType<typeof setUp>> | undefined;
    const clock: Clock = {
      now: () => (runner as Awaited<ReturnType<typeof setUp>>).clock.now(),
      setTimeout: (fn, ms) => (runner as Awaited<ReturnType<typeof setUp>>).clock.setTimeout(fn, ms),
      clearTimeout: (id) => (runner as Awaited<ReturnType<typeof setUp>>).clock.clearTimeout(id),
    };
    const played = people(clock);
    const first = await setUp(askFirst, { people: { gate: played.gate, journal: played.journal, clock } });
    runner = first;
    const task = first.intake.deliver({ id: 'hr-1', goal: 'build it' });
    await expect.poll(() => played.asked.length).toBe(1);
    await first.control('hr-1', { action: 'pause' });
    // Past the question's 60 s while held: it expires, and nobody is asked meanwhile.
    first.clock.advance(HOUR);
    await first.bus.settled();
    expect(played.asked).toHaveLength(1);
    // The coordinator stops (kill -9, say) while the task is still paused; another takes it from its record.
    await first.runner.stop();
    await task.handled;
    const { intake } = await startRunner(first, askFirst, {
      people: { gate: played.gate, journal: played.journal, clock },
    });
    const again = intake.deliver(
      { id: 'hr-1', goal: 'build it' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(async () => (await first.record('hr-1'))?.paused).toBeDefined();
    await first.bus.settled();
    expect(first.bus.eventsOf('task.failed')).toHaveLength(0);
    expect(played.asked).toHaveLength(1);
    await first.control('hr-1', { action: 'resume' });
    await expect.poll(() => played.asked.length).toBe(2);
    played.answer('q2', 'yes');
    ok(await first.next('hr-1.build.1'));
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
    expect(played.asked).toHaveLength(2);
  });
});
