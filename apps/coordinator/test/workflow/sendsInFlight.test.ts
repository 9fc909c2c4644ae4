import type { AgentStepReply } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { SendsInFlight } from '../../src/workflow/sendsInFlight.ts';
import type { StepCallEvent } from '../../src/workflow/stepCall.ts';

const replied = (stepId: string): StepCallEvent => ({
  type: 'replied',
  reply: { stepId, ok: true, output: `done ${stepId}` } as AgentStepReply,
});

/** A call that notes what it hears in `order`. */
const callOf = (name: string, order: string[], then?: () => void) => (event: StepCallEvent) => {
  order.push(`${name} hears ${event.type}`);
  then?.();
};

describe('the sends in flight of a runner', () => {
  it('runs what must come before an event right before its call hears it: at once when heard, at the adoption when kept', () => {
    const sends = new SendsInFlight();
    const order: string[] = [];
    const awake = sends.start('task-1', 'task-1.plan.1', () => {});
    awake.heardBy(callOf('plan', order));
    awake.tell(replied('task-1.plan.1'), () => order.push('plan owed'));
    expect(order).toEqual(['plan owed', 'plan hears replied']);

    // A task asleep: the reply is kept, and nothing is owed until a woken call hears it.
    order.length = 0;
    const asleep = sends.start('task-2', 'task-2.plan.1', () => {});
    sends.detach('task-2');
    asleep.tell(replied('task-2.plan.1'), () => order.push('plan owed'));
    expect(order).toEqual([]);
    sends.waking('task-2');
    sends.adopt('task-2', 'task-2.plan.1')?.heardBy(callOf('plan', order));
    expect(order).toEqual([]);
    sends.started('task-2');
    expect(order).toEqual(['plan owed', 'plan hears replied']);
  });

  it('runs nothing for an event its call was stopped before hearing: a branch a first one ended, both replies kept', () => {
    const sends = new SendsInFlight();
    const order: string[] = [];
    const ended: string[] = [];
    const a = sends.start('task-1', 'task-1.a.1', () => ended.push('a'));
    const b = sends.start('task-1', 'task-1.b.1', () => ended.push('b'));
    sends.detach('task-1');
    // Both branches' local steps reply while the task sleeps (a reply settles its request, as `StepSend` says).
    for (const [send, name] of [
      [a, 'a'],
      [b, 'b'],
    ] as const) {
      send.settled();
      send.tell(replied(`task-1.${name}.1`), () => order.push(`${name} owed`));
    }
    sends.waking('task-1');
    // `join: first`: hearing a's reply ends the parallel step, whose leaving stops b's call.
    a.heardBy(callOf('a', order, () => b.stopped()));
    b.heardBy(callOf('b', order));
    sends.started('task-1');
    expect(order).toEqual(['a owed', 'a hears replied']);
    expect(ended).toEqual(['b']);
    expect(sends.size).toBe(0);
  });
});
