import type { StepHeartbeat } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { type LocalDelivery, StepRequesters } from '../../src/agent/stepRequesters.ts';
import { delivered, okReply, stepRequest } from './hostFakes.ts';

/** A requester in this process: what it was told, and the order it was answered in among others. */
function localRequester(stepId: string, answered: string[], name: string) {
  const told: StepHeartbeat[] = [];
  const delivery: LocalDelivery = {
    subject: 'local:demo.writer',
    value: stepRequest(stepId),
    respond: () => answered.push(name),
    activity: (heartbeat) => told.push(heartbeat),
  };
  return { delivery, told };
}

const plain = (stepId: string): StepHeartbeat => ({ stepId, heartbeat: true });

describe('who waits for a step', () => {
  it('tells a requester in this process only what is news to it: whom the step waits on, and a model call that lasts', () => {
    const answered: string[] = [];
    const first = localRequester('t1.write.1', answered, 'first');
    const requesters = new StepRequesters(first.delivery);
    const approval: StepHeartbeat = { ...plain('t1.write.1'), waitingFor: { kind: 'approval', id: 'ap-1' } };
    const another: StepHeartbeat = { ...plain('t1.write.1'), waitingFor: { kind: 'approval', id: 'ap-2' } };
    const question: StepHeartbeat = { ...plain('t1.write.1'), waitingFor: { kind: 'question', id: 'ap-2' } };
    const onModel: StepHeartbeat = { ...plain('t1.write.1'), waitingOnModel: true };

    // Nothing waited on yet: the plain heartbeat is no news.
    requesters.report(plain('t1.write.1'));
    for (const heartbeat of [
      approval,
      approval,
      another,
      question,
      question,
      plain('t1.write.1'),
      onModel,
      onModel,
    ])
      requesters.report(heartbeat);
    expect(first.told).toEqual([approval, another, question, plain('t1.write.1'), onModel]);

    // One that joins later hears what is news to it, the wait the first already knows of.
    const second = localRequester('t1.write.1', answered, 'second');
    requesters.add(second.delivery);
    requesters.report(onModel);
    expect(second.told).toEqual([onModel]);
    expect(first.told).toHaveLength(5);
  });

  it('sends heartbeats to the inboxes still listened on, and the reply to every requester, those over the bus first', () => {
    const answered: string[] = [];
    const local = localRequester('t2.write.1', answered, 'local');
    const requesters = new StepRequesters(local.delivery);
    expect(requesters.remote).toBe(false);
    expect(requesters.local).toBe(true);
    expect(requesters.inboxes()).toEqual([]);

    const a = delivered(stepRequest('t2.write.1'), 'inbox.a');
    const b = delivered(stepRequest('t2.write.1'), 'inbox.b');
    requesters.add(a.delivery);
    requesters.add(b.delivery);
    expect(requesters.remote).toBe(true);
    requesters.heard('inbox.a', false);
    requesters.heard('inbox.a', false);
    expect(requesters.inboxes()).toEqual(['inbox.b']);
    // A heartbeat that got through clears what the earlier ones found.
    requesters.heard('inbox.a', true);
    expect(requesters.inboxes()).toEqual(['inbox.a', 'inbox.b']);
    // Heartbeats over the bus reach an inbox, not a requester's `activity`.
    requesters.report({ ...plain('t2.write.1'), waitingOnModel: true });
    expect(local.told).toHaveLength(1);

    a.delivery.respond = () => answered.push('a');
    b.delivery.respond = () => answered.push('b');
    requesters.respond(okReply('t2.write.1'));
    expect(answered).toEqual(['a', 'b', 'local']);
  });

  it('says whether anyone still waits once a requester in this process leaves', () => {
    const answered: string[] = [];
    const first = localRequester('t3.write.1', answered, 'first');
    const second = localRequester('t3.write.1', answered, 'second');
    const requesters = new StepRequesters(first.delivery);
    requesters.add(second.delivery);
    expect(requesters.remove(first.delivery)).toBe(true);
    expect(requesters.remove(second.delivery)).toBe(false);
    expect(requesters.local).toBe(false);
    requesters.respond(okReply('t3.write.1'));
    expect(answered).toEqual([]);
  });
});
