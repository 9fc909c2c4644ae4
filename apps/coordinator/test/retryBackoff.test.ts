import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it, vi } from 'vitest';
import { failedReply, pipelineOf, run, text } from './support/runFlow.ts';

const flow = pipelineOf(
  ['builder', 'closer'],
  [
    { id: 'build', kind: 'agent', agent: 'builder', retry: { max: 2, backoff: 2 } },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ],
);

describe('a retried step', () => {
  it('waits out its backoff on the clock the workflow is given, doubling it before each retry', async () => {
    const clock = new SimulatedClock();
    const builds: string[] = [];
    const running = run(
      flow,
      {
        builder: (request) => {
          builds.push(request.stepId);
          return builds.length < 3 ? failedReply(`attempt ${builds.length} broke`) : text('built');
        },
        closer: () => text('closed'),
      },
      { clock },
    );
    await vi.waitFor(() => expect(clock.pending()).toEqual([2_000]));
    expect(builds).toEqual(['task-1.build.1']);
    clock.advance(1_999);
    expect(builds).toHaveLength(1);
    clock.advance(1);
    await vi.waitFor(() => expect(clock.pending()).toEqual([4_000]));
    expect(builds).toEqual(['task-1.build.1', 'task-1.build.1-r1']);
    clock.advance(4_000);
    const { output } = await running;
    expect(builds).toEqual(['task-1.build.1', 'task-1.build.1-r1', 'task-1.build.1-r2']);
    expect(output).toMatchObject({ status: 'completed', output: 'closed' });
  });

  it('restored from a checkpoint taken while it waits, waits its backoff again on the clock it is given, then retries', async () => {
    const first = new SimulatedClock();
    let waiting: unknown;
    let cancel = () => {};
    const cut = run(
      flow,
      { builder: () => failedReply('broke'), closer: () => text('closed') },
      {
        clock: first,
        onCheckpoint: (snapshot) => {
          if ((snapshot as { value: unknown }).value === 'retry:build') waiting = snapshot;
        },
        onStart: (actor) => {
          cancel = () => actor.send({ type: 'cancel' });
        },
      },
    );
    await vi.waitFor(() => expect(waiting).toBeDefined());
    cancel();
    await cut;

    const clock = new SimulatedClock();
    const builds: string[] = [];
    const resumed = run(
      flow,
      {
        builder: (request) => {
          builds.push(request.stepId);
          return text('built');
        },
        closer: () => text('closed'),
      },
      { clock, snapshot: waiting },
    );
    await vi.waitFor(() => expect(clock.pending()).toEqual([2_000]));
    clock.advance(1_999);
    expect(builds).toEqual([]);
    clock.advance(1);
    const { output } = await resumed;
    expect(builds).toEqual(['task-1.build.1-r1']);
    expect(output).toMatchObject({ status: 'completed', output: 'closed' });
  });

  it('clears its backoff timer when the task is cancelled while it waits', async () => {
    const clock = new SimulatedClock();
    let cancel = () => {};
    const running = run(
      flow,
      { builder: () => failedReply('broke'), closer: () => text('closed') },
      {
        clock,
        onStart: (actor) => {
          cancel = () => actor.send({ type: 'cancel', reason: 'enough' });
        },
      },
    );
    await vi.waitFor(() => expect(clock.pending()).toEqual([2_000]));
    cancel();
    const { output } = await running;
    expect(output).toMatchObject({ status: 'cancelled', cancelReason: 'enough' });
    expect(clock.pending()).toEqual([]);
  });
});
