import type { AgentStepRequest } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { beforeEach, describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { takeLocally } from '../../src/agent/localSteps.ts';
import { RecentReplies } from '../../src/agent/recentReplies.ts';
import { failedReply } from '../../src/agent/stepReply.ts';
import { LEFT_GRACE_MS } from '../../src/agent/stepRun.ts';
import { StepsInFlight } from '../../src/agent/stepsInFlight.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { delivered, heldStep, okReply, recordingHeartbeats, stepRequest } from './hostFakes.ts';

const writer: AgentDefinition = {
  name: 'writer',
  instructions: 'Write.',
  model: { provider: 'none', model: 'none', complete: () => Promise.reject(new Error('not asked')) },
  tools: [],
  rules: [],
  maxTurns: 1,
};

describe('the steps in flight on a host', () => {
  let clock: SimulatedClock;
  let sent: ReturnType<typeof recordingHeartbeats>;
  let started: { request: AgentStepRequest; held: ReturnType<typeof heldStep> }[];
  let steps: StepsInFlight;

  beforeEach(() => {
    clock = new SimulatedClock();
    sent = recordingHeartbeats();
    started = [];
    steps = new StepsInFlight({
      clock,
      heartbeats: sent.heartbeats,
      logger: createLogger({ level: 'silent' }),
      start: (_agent, request) => {
        const held = heldStep();
        started.push({ request, held });
        return held.step;
      },
    });
  });

  const take = (stepId: string, extra: Partial<AgentStepRequest> = {}) => {
    const sentStep = delivered(stepRequest(stepId, extra));
    steps.take(sentStep.delivery, writer);
    return sentStep;
  };
  /** One turn of the event loop: what the promises settled set off has run. */
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  it('runs a step sent again while it runs once: both requesters get its reply', async () => {
    const first = take('t1.write.1');
    const again = take('t1.write.1');
    expect(started).toHaveLength(1);
    expect(steps.size).toBe(1);
    started[0]?.held.end(okReply('t1.write.1'));
    await expect.poll(() => again.answers).toEqual([okReply('t1.write.1')]);
    expect(first.answers).toEqual([okReply('t1.write.1')]);
    expect(steps.size).toBe(0);
    expect(sent.stopped).toEqual(['t1.write.1']);
  });

  it('answers a step sent again after it ended with the reply it gave, running nothing', async () => {
    take('t2.write.1');
    started[0]?.held.end(okReply('t2.write.1'));
    await expect.poll(() => steps.size).toBe(0);
    const again = take('t2.write.1');
    await expect.poll(() => again.answers).toEqual([okReply('t2.write.1')]);
    expect(started).toHaveLength(1);
  });

  it('starts a resend of an orphaned run once that run has unwound', async () => {
    const first = take('t3.write.1', { heartbeatMs: 1_000 });
    // The requester's inbox is found gone twice; ten heartbeats later nobody has waited for the step.
    steps.heard('t3.write.1', first.inbox, false);
    steps.heard('t3.write.1', first.inbox, false);
    clock.advance(10_000);
    expect(started[0]?.held.stops).toEqual([{ why: 'orphaned' }]);
    const again = take('t3.write.1');
    await settle();
    expect(started).toHaveLength(1);
    started[0]?.held.end(failedReply('t3.write.1', 'aborted', 'stopped'));
    await expect.poll(() => started.length).toBe(2);
    started[1]?.held.end(okReply('t3.write.1'));
    await expect.poll(() => again.answers).toEqual([okReply('t3.write.1')]);
  });

  it('starts a resend of a run its workflow here left and that was stopped for it once that run has unwound', async () => {
    const first = takeLocally(steps, writer, stepRequest('t3l.write.1'), { onActivity: () => {} });
    await settle();
    first.cancel();
    // Nobody took the step up again within the grace: the run is stopped, and is still unwinding (a tool call, say).
    clock.advance(LEFT_GRACE_MS);
    expect(started[0]?.held.stops).toEqual([{ why: 'aborted' }]);
    const again = delivered(stepRequest('t3l.write.1'));
    steps.take(again.delivery, writer);
    await settle();
    expect(started).toHaveLength(1);
    started[0]?.held.end(failedReply('t3l.write.1', 'aborted', 'stopped'));
    // Its aborted reply was for the workflow that left it: the resend gets a run of its own, not that reply.
    await expect.poll(() => started.length).toBe(2);
    started[1]?.held.end(okReply('t3l.write.1'));
    await expect.poll(() => again.answers).toEqual([okReply('t3l.write.1')]);
  });

  it('stops the steps of a task that ended, and only those, once', () => {
    take('t4.write.1');
    take('t4.review.1');
    take('t5.write.1');
    const ending = { status: 'cancelled' } as const;
    steps.endTask('t4', ending);
    steps.endTask('t4', ending);
    expect(started.map(({ held }) => held.stops.length)).toEqual([1, 1, 0]);
    expect(started[0]?.held.stops).toEqual([{ why: 'task_ended', taskId: 't4', ending }]);
  });

  it('on stop, stops every run, waits for their replies to go out and refuses new steps with worker_stopped', async () => {
    const first = take('t6.write.1');
    let stopped = false;
    const stopping = steps.stop().then(() => {
      stopped = true;
    });
    expect(steps.stopping).toBe(true);
    expect(started[0]?.held.stops).toEqual([{ why: 'worker_stopping' }]);
    await settle();
    expect(stopped).toBe(false);
    started[0]?.held.end(failedReply('t6.write.1', 'worker_stopped', 'stopping'));
    await stopping;
    expect(first.answers).toMatchObject([{ ok: false, error: { code: 'worker_stopped' } }]);
    expect(steps.size).toBe(0);
    const late = take('t7.write.1');
    expect(late.answers).toMatchObject([{ ok: false, error: { code: 'worker_stopped' } }]);
    expect(started).toHaveLength(1);
  });

  it('passes a model wait and a person wait to the run of that step', () => {
    take('t8.write.1', { heartbeatMs: 5_000 });
    steps.modelWait('t8.write.1', true);
    clock.advance(100);
    expect(sent.beats.at(-1)?.heartbeat).toMatchObject({ waitingOnModel: true });
    steps.waitingChanged('t8.write.1');
    expect(sent.beats).toHaveLength(3);
    // A step not here is nobody's concern.
    steps.modelWait('elsewhere.write.1', true);
    steps.waitingChanged('elsewhere.write.1');
    expect(sent.beats).toHaveLength(3);
  });
});

describe('the replies a host keeps for resends', () => {
  it('forgets the oldest beyond its limit', () => {
    const recent = new RecentReplies(2);
    for (const id of ['a', 'b', 'c']) recent.remember(id, Promise.resolve(okReply(id)));
    expect(recent.of('a')).toBeUndefined();
    expect(recent.of('b')).toBeDefined();
    expect(recent.of('c')).toBeDefined();
  });
});
