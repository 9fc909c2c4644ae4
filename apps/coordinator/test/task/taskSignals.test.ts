import { describe, expect, it } from 'vitest';
import { type SignalListener, type TaskSignal, TaskSignals } from '../../src/task/taskSignals.ts';

/** A listener that notes the signals it hears. */
const listener = (taskId: string, parent?: string) => {
  const heard: TaskSignal['type'][] = [];
  const it: SignalListener = {
    taskId,
    ...(parent === undefined ? {} : { parent }),
    deliver: (signal) => heard.push(signal.type),
  };
  return { it, heard };
};

describe("the runner's switchboard of task signals", () => {
  it('tells a parent’s end to its sub-tasks listening here and to no other task', () => {
    const signals = new TaskSignals();
    const a = listener('a', 'p');
    const b = listener('b', 'p');
    const c = listener('c', 'q');
    const d = listener('d');
    for (const each of [a, b, c, d]) signals.listen(each.it);
    expect(signals.parentEnded('p', 'cancelled').sort()).toEqual(['a', 'b']);
    expect([a.heard, b.heard, c.heard, d.heard]).toEqual([['parentEnded'], ['parentEnded'], [], []]);
    expect(signals.parentEnded('nobody', 'cancelled')).toEqual([]);
  });

  it('says whether any sub-task listens, as they come and go', () => {
    const signals = new TaskSignals();
    const top = signals.listen(listener('top').it);
    expect(signals.hasChildren).toBe(false);
    const one = signals.listen(listener('one', 'top').it);
    const two = signals.listen(listener('two', 'top').it);
    expect(signals.hasChildren).toBe(true);
    one();
    expect(signals.hasChildren).toBe(true);
    two();
    expect(signals.hasChildren).toBe(false);
    top();
    expect(signals.taskIds()).toEqual([]);
  });

  it('lets a task’s new listener take its place: the old one’s stop leaves it, and its parent is the new one’s', () => {
    const signals = new TaskSignals();
    const first = listener('t', 'p');
    const stopFirst = signals.listen(first.it);
    const second = listener('t', 'q');
    signals.listen(second.it);
    stopFirst();
    expect(signals.has('t')).toBe(true);
    expect(signals.parentEnded('p', 'x')).toEqual([]);
    expect(signals.parentEnded('q', 'x')).toEqual(['t']);
    expect([first.heard, second.heard]).toEqual([[], ['parentEnded']]);
    expect(signals.send('t', { type: 'stop' })).toBe(true);
    expect(second.heard).toEqual(['parentEnded', 'stop']);
  });
});
