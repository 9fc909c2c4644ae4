import type { AgentStepRequest, ToldMessage } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { beforeEach, describe, expect, it } from 'vitest';
import { RecentReplies } from '../../src/agent/recentReplies.ts';
import { failedReply } from '../../src/agent/stepReply.ts';
import { StepRun } from '../../src/agent/stepRun.ts';
import type { HumanGate, WaitingOn } from '../../src/approvals/humanGate.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { delivered, heldStep, okReply, recordingHeartbeats, stepRequest } from './hostFakes.ts';

describe('a run of a step on its host', () => {
  let clock: SimulatedClock;
  let sent: ReturnType<typeof recordingHeartbeats>;
  let recent: RecentReplies;
  let ended: StepRun[];
  let waiting: WaitingOn | undefined;
  let leftPending: string[];
  const human: HumanGate = {
    approve: async () => ({ decision: 'deny' }),
    ask: async () => '',
    waitingOn: () => waiting,
    leavePending: (stepId) => leftPending.push(stepId),
  };

  beforeEach(() => {
    clock = new SimulatedClock();
    sent = recordingHeartbeats();
    recent = new RecentReplies();
    ended = [];
    waiting = undefined;
    leftPending = [];
  });

  const start = (request: AgentStepRequest, inbox?: string) => {
    const held = heldStep();
    const first = delivered(request, inbox);
    const run = new StepRun(first.delivery, held.step, {
      clock,
      heartbeats: sent.heartbeats,
      human,
      logger: createLogger({ level: 'silent' }),
      recent,
      ended: (r) => ended.push(r),
    });
    return { run, held, first };
  };

  it('beats at once and then every heartbeatMs on the clock, to its requester, saying whom it waits on', () => {
    const { first } = start(stepRequest('t1.write.1', { heartbeatMs: 1_000 }), 'inbox.a');
    expect(sent.beats).toEqual([
      { stepId: 't1.write.1', inboxes: ['inbox.a'], heartbeat: { stepId: 't1.write.1', heartbeat: true } },
    ]);
    waiting = { kind: 'approval', id: 'ap-1' };
    clock.advance(1_000);
    expect(sent.beats).toHaveLength(2);
    expect(sent.beats[1]?.heartbeat).toEqual({ stepId: 't1.write.1', heartbeat: true, waitingFor: waiting });
    expect(first.answers).toEqual([]);
  });

  it('sends no heartbeat when the request asked for none', () => {
    start(stepRequest('t2.write.1'));
    clock.advance(60_000);
    expect(sent.beats).toEqual([]);
    expect(clock.pending()).toEqual([]);
  });

  it('gives its reply to every requester, one that joined and one whose inbox seemed gone, and keeps it for resends', async () => {
    const { run, held, first } = start(stepRequest('t3.write.1', { heartbeatMs: 1_000 }), 'inbox.a');
    const again = delivered(stepRequest('t3.write.1', { heartbeatMs: 1_000 }), 'inbox.b');
    run.join(again.delivery);
    expect(sent.beats.at(-1)?.inboxes).toEqual(['inbox.a', 'inbox.b']);
    run.heard('inbox.a', false);
    run.heard('inbox.a', false);
    clock.advance(1_000);
    // Two heartbeats in a row found inbox.a gone: they go to inbox.b only.
    expect(sent.beats.at(-1)?.inboxes).toEqual(['inbox.b']);
    held.end(okReply('t3.write.1'));
    await run.done;
    expect(first.answers).toEqual([okReply('t3.write.1')]);
    expect(again.answers).toEqual([okReply('t3.write.1')]);
    expect(await recent.of('t3.write.1')).toEqual(okReply('t3.write.1'));
    expect(ended).toEqual([run]);
    expect(clock.pending()).toEqual([]);
  });

  it('hands its agent step the told messages a resend that joins it carries (events the run may have missed)', () => {
    const { run, held } = start(stepRequest('t9.write.1', { heartbeatMs: 1_000 }), 'inbox.a');
    const told: ToldMessage[] = [];
    held.step.tell = (message) => told.push(message);
    // The host missed the task.told event (its connection was down); the workflow, hearing no heartbeat, sent the
    // step again with what it owes, and the resend joins the run still going here.
    const message = { id: 'm-1', text: 'use the staging bucket', at: '2026-12-06T18:00:00.000Z' };
    run.join(
      delivered(stepRequest('t9.write.1', { heartbeatMs: 1_000, told: [message] }), 'inbox.b').delivery,
    );
    expect(told).toEqual([message]);
  });

  it('keeps an inbox that missed one heartbeat and then answered', () => {
    const { run } = start(stepRequest('t4.write.1', { heartbeatMs: 1_000 }), 'inbox.a');
    run.heard('inbox.a', false);
    run.heard('inbox.a', true);
    run.heard('inbox.a', false);
    clock.advance(1_000);
    expect(sent.beats.at(-1)?.inboxes).toEqual(['inbox.a']);
  });

  it('stops itself once after ten heartbeats with nobody listening, leaving its requests pending, and keeps no reply', async () => {
    const { run, held } = start(stepRequest('t5.write.1', { heartbeatMs: 1_000 }), 'inbox.a');
    run.heard('inbox.a', false);
    run.heard('inbox.a', false);
    clock.advance(9_999);
    expect(held.stops).toEqual([]);
    clock.advance(1);
    expect(held.stops).toEqual([{ why: 'orphaned' }]);
    expect(run.orphaned).toBe(true);
    expect(leftPending).toEqual(['t5.write.1']);
    clock.advance(5_000);
    expect(held.stops).toHaveLength(1);
    held.end(okReply('t5.write.1'));
    await run.done;
    // The run did not end the step: a resend runs it again, from its journal.
    expect(recent.of('t5.write.1')).toBeUndefined();
  });

  it('reports a model call that lasts 100 ms in a heartbeat then, and its end at once; a quicker one never', () => {
    const { run } = start(stepRequest('t6.write.1', { heartbeatMs: 5_000 }));
    run.modelWait(true);
    clock.advance(99);
    run.modelWait(false);
    expect(sent.beats).toHaveLength(1);
    run.modelWait(true);
    clock.advance(100);
    expect(sent.beats.at(-1)?.heartbeat).toEqual({
      stepId: 't6.write.1',
      heartbeat: true,
      waitingOnModel: true,
    });
    run.modelWait(false);
    expect(sent.beats).toHaveLength(3);
    expect(sent.beats.at(-1)?.heartbeat).toEqual({ stepId: 't6.write.1', heartbeat: true });
  });

  it('sends its agent step one stop: the first reason is the one its reply gives', () => {
    const { run, held } = start(stepRequest('t7.write.1'));
    run.stop({ why: 'task_ended', taskId: 't7', ending: { status: 'cancelled' } });
    run.stop({ why: 'worker_stopping' });
    expect(held.stops).toEqual([{ why: 'task_ended', taskId: 't7', ending: { status: 'cancelled' } }]);
    expect(run.stopped).toBe(true);
  });

  it.each([
    ['aborted', false],
    ['worker_stopped', false],
    ['journal_unavailable', false],
    ['step_timeout', true],
    ['invalid_output', true],
  ] as const)('keeps a reply failed %s for resends: %s', async (code, kept) => {
    const { run, held } = start(stepRequest('t8.write.1'));
    held.end(failedReply('t8.write.1', code, 'why'));
    await run.done;
    expect(recent.of('t8.write.1') !== undefined).toBe(kept);
  });
});
