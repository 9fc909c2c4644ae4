import { Kvm } from '@nats-io/kv';
import type { Gateway } from '@troupe/gateway';
import { BUCKETS, DEFAULT_TASK_LIMITS, TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callGateway, startAdminGateway } from './support/adminGateway.ts';
import { fixturePath, type Harness, kinds, startHarness, startSecondCoordinator } from './support/harness.ts';
import { readSse } from './support/sse.ts';

const ADMIN = 'admin-token-0123456789abcdef';

/**
 * A mark in KV `queued` that is not JSON (written by hand, or by a broken client) while its task waits in `TASKS`:
 * it must neither stall the task (triage reads the mark on each delivery) nor hide the other queued tasks from the
 * gateway's list.
 */
describe('a queued task whose mark is not JSON', () => {
  let h: Harness;
  let gateway: Gateway;
  let second: { stop(): Promise<void> } | undefined;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')]);
    // Nothing takes summing's tasks until another coordinator starts: they wait in TASKS, marked.
    await h.coordinator.stop();
    gateway = await startAdminGateway(h.bus, ADMIN);
  });
  afterAll(async () => {
    await gateway?.close();
    await second?.stop();
    await h?.stop();
  });

  const call = (method: string, path: string, body?: unknown) =>
    callGateway(gateway, ADMIN, method, path, body);

  it('is read as no mark: the other queued tasks are listed, and the task runs once a coordinator starts', async () => {
    const sum = { goal: 'add', input: { numbers: [1, 2, 3] } };
    expect((await call('POST', '/v1/pipelines/summing/tasks', { ...sum, id: 'qf-garbled-1' })).status).toBe(
      202,
    );
    expect((await call('POST', '/v1/pipelines/summing/tasks', { ...sum, id: 'qf-fine-1' })).status).toBe(202);
    const raw = await new Kvm(h.client).open(BUCKETS.queued);
    await raw.put('qf-garbled-1', '{"taskId": "qf-garbled-1", "pipel');

    // The garbled one is unknown to the gateway until it is claimed; the other is listed as ever.
    expect((await call('GET', '/v1/tasks/qf-garbled-1')).status).toBe(404);
    expect((await call('GET', '/v1/tasks/qf-fine-1')).body).toMatchObject({ status: 'submitted' });
    const listed = await call('GET', '/v1/tasks?status=submitted');
    expect(listed.status).toBe(200);
    expect(listed.body.tasks.map((t: { taskId: string }) => t.taskId)).toEqual(['qf-fine-1']);

    second = await startSecondCoordinator(h, ['summing.yaml']);
    expect((await h.finalOf('qf-garbled-1', 30_000)).kind).toBe('task.completed');
    expect((await h.finalOf('qf-fine-1', 30_000)).kind).toBe('task.completed');
    expect(kinds(h.eventsOf('qf-garbled-1'))[0]).toBe('task.accepted');
    await expect
      .poll(async () => (await call('GET', '/v1/tasks/qf-garbled-1')).body.status)
      .toBe('completed');
  }, 90_000);
});

describe('a queued task cancelled with the longest reason a cancel may give', () => {
  let h: Harness;
  let gateway: Gateway;
  let second: { stop(): Promise<void> } | undefined;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')]);
    await h.coordinator.stop();
    gateway = await startAdminGateway(h.bus, ADMIN);
  });
  afterAll(async () => {
    await gateway?.close();
    await second?.stop();
    await h?.stop();
  });

  it('is cancelled as a running one would be, the token’s name added to the whole reason', async () => {
    const post = (path: string, body: unknown) =>
      fetch(`${gateway.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const sum = { goal: 'add', input: { numbers: [1, 2] }, id: 'qf-long-1' };
    expect((await post('/v1/pipelines/summing/tasks', sum)).status).toBe(202);
    // 2,000 characters: the most POST /v1/tasks/{id}/cancel takes.
    const reason = 'r'.repeat(2_000);
    const cancelled = await post('/v1/tasks/qf-long-1/cancel', { reason });
    expect({ status: cancelled.status, body: await cancelled.json() }).toMatchObject({
      status: 200,
      body: { status: 'cancelled' },
    });
    second = await startSecondCoordinator(h, ['summing.yaml']);
    const final = await h.finalOf('qf-long-1', 30_000);
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe(`${reason} (token ops)`);
    expect(kinds(h.eventsOf('qf-long-1'))).toEqual(['task.accepted', 'task.cancelled']);
  }, 90_000);
});

/**
 * A coordinator whose `maxTaskBytes` is lower than the gateway's `taskLimits`: the gateway takes the task, marks it
 * queued and answers 202; the coordinator refuses it. The task must end visibly, with the refusal's reason, and not be
 * shown `submitted` forever.
 */
describe('a queued task the coordinator refuses', () => {
  let h: Harness;
  let gateway: Gateway;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')], {
      limits: { ...DEFAULT_TASK_LIMITS, maxTaskBytes: 1_024 },
    });
    gateway = await startAdminGateway(h.bus, ADMIN);
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  const call = (method: string, path: string) => callGateway(gateway, ADMIN, method, path);

  it('ends failed (refused) with the reason, its mark gone, where GET and the task list show it', async () => {
    const numbers = Array.from({ length: 400 }, (_, i) => i);
    const submitted = await fetch(`${gateway.url}/v1/pipelines/summing/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ goal: 'add', input: { numbers }, id: 'qf-big-1' }),
    });
    expect(submitted.status).toBe(202);

    const final = await h.finalOf('qf-big-1', 30_000);
    expect(final).toMatchObject({
      kind: 'task.failed',
      data: { reason: 'refused', message: expect.stringContaining('--max-task-bytes') },
    });
    await expect
      .poll(async () => (await call('GET', '/v1/tasks/qf-big-1')).body)
      .toMatchObject({
        status: 'failed',
        failure: { reason: 'refused', message: expect.stringContaining('--max-task-bytes') },
      });
    const queued = await new Kvm(h.client).open(BUCKETS.queued);
    // Deleted: a raw read sees the delete marker, or nothing.
    expect((await queued.get('qf-big-1'))?.operation ?? 'none').not.toBe('PUT');
    const listed = await call('GET', '/v1/tasks?status=submitted');
    expect(listed.body.tasks.map((t: { taskId: string }) => t.taskId)).not.toContain('qf-big-1');
    // Its event stream carries its end, and ends; a cancel is refused as for any ended task.
    const read = await readSse(`${gateway.url}/v1/tasks/qf-big-1/events`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(read.ended).toBe(true);
    expect(TroupeEvent.parse(JSON.parse(read.messages.at(-1)?.data ?? '{}')).kind).toBe('task.failed');
    const cancel = await fetch(`${gateway.url}/v1/tasks/qf-big-1/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(cancel.status).toBe(409);
    // An operator still finds the refusal where refusals are reported.
    await h.nextInvalid((e) => e.reason.includes('--max-task-bytes'), 10_000);
  }, 60_000);
});
