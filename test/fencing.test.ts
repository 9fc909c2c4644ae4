import { BUCKETS, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  eventOf,
  fixturePath,
  type Harness,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

describe('a coordinator whose task was taken over', () => {
  let h: Harness;
  const logLines: string[] = [];

  beforeAll(async () => {
    h = await startHarness([fixturePath('resume.yaml')], { logLines });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('stops the task at its next checkpoint instead of running it alongside the new owner', async () => {
    publishTask(h, 'resume', { id: 'fenced-1', goal: 'be run by one coordinator at a time' });
    await eventOf(h, 'fenced-1', 'step.started');
    // Another coordinator resumes the task (as after this one was cut off longer than the ack wait).
    const store = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    const record = await store.get('fenced-1');
    if (!record) throw new Error('no record');
    expect(record.value.lease).toEqual(expect.any(String));
    await store.put('fenced-1', { ...record.value, lease: 'another-coordinator' });

    // At its next write of the record (the plan step's model wait, 100 ms in, or the step's end, 1.5 s in), this
    // coordinator finds the record is not its own.
    await waitUntil(
      () => logLines.some((l) => l.includes('task fenced-1 was taken over by another coordinator')),
      'the takeover to be logged',
    );
    // Its run of the task is over: its workflow actor is stopped, so nothing more of the task comes from here.
    await waitUntil(() => !h.coordinator.running().includes('fenced-1'), 'the run to end');
    const events = h.eventsOf('fenced-1');
    const kinds = events.map((e) => e.kind);
    // The workflow went no further than the step it was in (a transition being checkpointed may have completed
    // it): the next steps and the task's end are left to the new owner, and the record is its own.
    const completed = events.flatMap((e) => (e.kind === 'step.completed' ? [e.data.step] : []));
    expect(completed.filter((step) => step !== 'plan')).toEqual([]);
    expect(kinds).not.toContain('task.completed');
    expect(kinds).not.toContain('task.failed');
    expect((await store.get('fenced-1'))?.value.lease).toBe('another-coordinator');
  });
});
