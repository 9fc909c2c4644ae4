import type { HumanRequest, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { describeActivity } from '../src/format/taskActivity.ts';

const NOW = Date.parse('2026-11-29T12:00:30.000Z');
const SINCE = '2026-11-29T12:00:18.000Z';

const record = (extra: Partial<WorkflowRecord> = {}): WorkflowRecord => ({
  taskId: 'rel-1',
  pipeline: 'release',
  streamSequence: 1,
  status: 'running',
  state: 'release',
  goal: 'ship it',
  round: 1,
  usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
  createdAt: '2026-11-29T12:00:00.000Z',
  updatedAt: SINCE,
  ...extra,
});

const request = (id: string, extra: Partial<HumanRequest> = {}): HumanRequest => ({
  id,
  kind: 'approval',
  taskId: 'rel-1',
  pipeline: 'release',
  agent: 'engineer',
  stepId: 'rel-1.release.1',
  prompt: 'needs approval',
  status: 'pending',
  requestedAt: SINCE,
  expiresAt: '2026-11-29T12:05:18.000Z',
  ...extra,
});

describe('describeActivity', () => {
  it('says nothing of a running task whose record says nothing, and of an ended one', () => {
    expect(describeActivity(record(), [], NOW)).toEqual([]);
    const ended = record({
      status: 'completed',
      activity: { kind: 'agent', step: 'release', agent: 'engineer', since: SINCE },
    });
    expect(describeActivity(ended, [request('ap-1')], NOW)).toEqual([]);
  });

  it('says which agent works on which step, and for how long', () => {
    const working = record({ activity: { kind: 'agent', step: 'release', agent: 'engineer', since: SINCE } });
    expect(describeActivity(working, [], NOW)).toEqual(['agent engineer working on step release (for 12 s)']);
  });

  it('says an agent waits on its model, and for how long', () => {
    const waiting = record({ activity: { kind: 'model', step: 'release', agent: 'engineer', since: SINCE } });
    expect(describeActivity(waiting, [], NOW)).toEqual([
      'agent engineer waiting on its model in step release (for 12 s)',
    ]);
  });

  it('says a step waits for a worker, and how to start one', () => {
    const waiting = record({
      activity: { kind: 'worker', step: 'release', agent: 'engineer', since: SINCE },
    });
    expect(describeActivity(waiting, [], NOW)).toEqual([
      'waiting for a worker that serves agent engineer (start one: troupe worker <pipeline.yaml>)',
    ]);
  });

  it('says a step waits for a person, and how to answer, once per request', () => {
    const asking = record({
      activity: {
        kind: 'person',
        step: 'release',
        agent: 'engineer',
        request: { kind: 'approval', id: 'ap-1' },
        since: SINCE,
      },
    });
    expect(describeActivity(asking, [request('ap-1')], NOW)).toEqual([
      'waiting for a person: approval ap-1 (troupe approve ap-1 / troupe deny ap-1 "<reason>")',
    ]);
  });

  it('says a task is paused, by whom, for how long and why, and how to let it go on, before what its step does', () => {
    const paused = record({
      paused: { since: SINCE, by: 'ana', reason: 'it uses\nthe v1 API' },
      activity: { kind: 'agent', step: 'release', agent: 'engineer', since: SINCE },
    });
    expect(describeActivity(paused, [], NOW)).toEqual([
      'paused by ana (for 12 s): it uses the v1 API (troupe resume rel-1 lets it go on)',
      'agent engineer working on step release (for 12 s)',
    ]);
    expect(describeActivity(record({ paused: { since: SINCE } }), [], NOW)).toEqual([
      'paused (for 12 s) (troupe resume rel-1 lets it go on)',
    ]);
  });

  it("lists the task's pending requests when the record does not say it waits for them", () => {
    const requests = [
      request('ap-2'),
      request('q-1', { kind: 'question' }),
      request('ap-3', { status: 'allowed' }),
      request('ap-4', { taskId: 'other' }),
    ];
    expect(describeActivity(record(), requests, NOW)).toEqual([
      'waiting for a person: approval ap-2 (troupe approve ap-2 / troupe deny ap-2 "<reason>")',
      'waiting for a person: question q-1 (troupe answer q-1 "…")',
    ]);
  });
});
