import type { AgentStepRequest, ToldMessage } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { RECENT_STEERING_LIMITS, RecentSteering } from '../../src/agent/recentSteering.ts';

const T0 = Date.UTC(2026, 11, 6, 18);

function request(taskId: string, extra: Partial<AgentStepRequest> = {}): AgentStepRequest {
  return {
    stepId: `${taskId}.work.1`,
    taskId,
    pipeline: 'demo',
    agent: 'worker',
    step: 'work',
    round: 1,
    goal: 'g',
    context: [],
    expect: 'text',
    sentAt: T0,
    ...extra,
  };
}

const message = (id: string, at: number, text = `message ${id}`): ToldMessage => ({
  id,
  text,
  at: new Date(at).toISOString(),
});

describe('the steering a host heard lately', () => {
  it('tells a step a pause that began at or after its request was sent, and not one before', () => {
    const steering = new RecentSteering(new SimulatedClock(T0));
    steering.paused('t1', T0);
    steering.paused('t2', T0 + 5);
    steering.paused('t3', T0 - 1);
    expect(steering.missedBy(request('t1'))).toEqual({ paused: true, told: [] });
    expect(steering.missedBy(request('t2'))).toEqual({ paused: true, told: [] });
    // A step sent after the pause began is a resend after a resume whose event this host never heard.
    expect(steering.missedBy(request('t3'))).toBeUndefined();
    expect(steering.missedBy(request('t4'))).toBeUndefined();
  });

  it('forgets a pause its resume ended, but not a later one for an earlier resume heard late', () => {
    const steering = new RecentSteering(new SimulatedClock(T0));
    steering.paused('t1', T0 + 5);
    steering.resumed('t1', T0 + 5);
    expect(steering.missedBy(request('t1'))).toBeUndefined();

    steering.paused('t2', T0 + 10);
    steering.resumed('t2', T0 + 5);
    expect(steering.missedBy(request('t2'))?.paused).toBe(true);
    // A resume that does not say which pause it ended (an older coordinator's) ends the one in force.
    steering.resumed('t2', undefined);
    expect(steering.missedBy(request('t2'))).toBeUndefined();
  });

  it('gives a step the messages told at or after its request was sent that it does not carry, each once, oldest first', () => {
    const steering = new RecentSteering(new SimulatedClock(T0));
    steering.told('t1', message('m-1', T0 - 1));
    steering.told('t1', message('m-2', T0));
    steering.told('t1', message('m-3', T0 + 1));
    steering.told('t1', message('m-3', T0 + 1));
    steering.told('t1', message('m-4', T0 + 2));
    const carried = request('t1', { told: [message('m-3', T0 + 1)] });
    // m-1 was told before the send and left out of it on purpose (another step read it); m-3 it carries.
    expect(steering.missedBy(carried)).toEqual({
      paused: false,
      told: [message('m-2', T0), message('m-4', T0 + 2)],
    });
  });

  it('gives nothing to a request without a sent time (an older coordinator)', () => {
    const steering = new RecentSteering(new SimulatedClock(T0));
    steering.paused('t1', T0);
    steering.told('t1', message('m-1', T0));
    const { sentAt: _, ...unsent } = request('t1');
    expect(steering.missedBy(unsent)).toBeUndefined();
  });

  it('forgets what it heard a minute ago, and a task that ended', () => {
    const clock = new SimulatedClock(T0);
    const steering = new RecentSteering(clock);
    steering.paused('t1', T0);
    steering.told('t2', message('m-1', T0));
    clock.advance(RECENT_STEERING_LIMITS.ageMs - 1);
    steering.told('t2', message('m-2', T0 + 1));
    expect(steering.missedBy(request('t1'))?.paused).toBe(true);
    clock.advance(1);
    expect(steering.missedBy(request('t1'))).toBeUndefined();
    // The task heard lately keeps its newer message only.
    expect(steering.missedBy(request('t2'))?.told.map((m) => m.id)).toEqual(['m-2']);
    expect(steering.size).toBe(1);
    steering.forget('t2');
    expect(steering.size).toBe(0);
  });

  it('keeps at most its bounds of tasks, messages a task and text, dropping the least lately heard first', () => {
    const clock = new SimulatedClock(T0);
    const steering = new RecentSteering(clock, {
      tasks: 3,
      messagesPerTask: 2,
      textBytes: 100,
      ageMs: 60_000,
    });
    for (const taskId of ['t1', 't2', 't3', 't4']) steering.paused(taskId, T0);
    expect(steering.size).toBe(3);
    expect(steering.missedBy(request('t1'))).toBeUndefined();
    expect(steering.missedBy(request('t4'))?.paused).toBe(true);

    for (const id of ['m-1', 'm-2', 'm-3']) steering.told('t4', message(id, T0, 'x'.repeat(10)));
    expect(steering.missedBy(request('t4'))?.told.map((m) => m.id)).toEqual(['m-2', 'm-3']);

    // 100 bytes of text at most: a long message pushes out the least lately heard tasks until it fits, t4 last.
    steering.told('t5', message('m-1', T0, 'y'.repeat(90)));
    expect(steering.missedBy(request('t2'))).toBeUndefined();
    expect(steering.missedBy(request('t5'))?.told).toHaveLength(1);
    expect(steering.missedBy(request('t4'))).toBeUndefined();
  });
});
