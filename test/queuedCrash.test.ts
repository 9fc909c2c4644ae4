import { Kvm } from '@nats-io/kv';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import type { Gateway } from '@troupe/gateway';
import { BUCKETS } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callGateway, startAdminGateway } from './support/adminGateway.ts';
import { type CutAfterWrite, cutAfterWrite } from './support/cutAfterWrite.ts';
import { fixturePath, type Harness, kinds, startHarness } from './support/harness.ts';

const ADMIN = 'admin-token-0123456789abcdef';
const ACK_WAIT_MS = 1_500;

/**
 * A coordinator that dies (cut off from NATS, as by kill -9) right after it writes a queued task's record, before
 * it has taken or deleted the task's mark in KV `queued`: the coordinator that gets the redelivery finishes what it
 * began, so the task runs once (or ends cancelled, when it was cancelled while queued) and no mark is left.
 */
describe('a coordinator dies between a queued task’s record and its mark', () => {
  let h: Harness;
  let gateway: Gateway;
  const stops: (() => Promise<void>)[] = [];
  const proxies: CutAfterWrite[] = [];

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')], { ackWaitMs: ACK_WAIT_MS });
    // Nothing takes summing's tasks until the coordinators below start.
    await h.coordinator.stop();
    gateway = await startAdminGateway(h.bus, ADMIN);
  });
  afterAll(async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
    for (const proxy of proxies.splice(0)) await proxy.stop();
    await gateway?.close();
    await h?.stop();
  });

  const coordinatorAt = async (url: string, name: string) => {
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    const bus = await NatsBus.connect({ servers: url, name, logger, reconnect: false });
    // Closed in the end even when the coordinator never finishes starting.
    stops.push(() => bus.close().catch(() => undefined));
    const registry = builtinTools();
    const coordinator = await startCoordinator({
      bus,
      pipelines: [await loadPipeline(fixturePath('summing.yaml'), { toolNames: registry.names() })],
      logger,
      workspaceRoot: h.workspaceRoot,
      registry,
      ackWaitMs: ACK_WAIT_MS,
    });
    const stop = async () => {
      await coordinator.stop().catch(() => undefined);
      await bus.close().catch(() => undefined);
    };
    stops.push(stop);
    return stop;
  };
  const call = (method: string, path: string, body?: unknown) =>
    callGateway(gateway, ADMIN, method, path, body);
  /** The task's mark as stored (a deleted one is a DEL entry: none). */
  const marked = async (taskId: string) => {
    const entry = await (await new Kvm(h.client).open(BUCKETS.queued)).get(taskId);
    return entry?.operation === 'PUT' ? entry.json() : null;
  };

  /** Submits `taskId` through the gateway, then runs a coordinator that is cut off right after its record's first write. */
  const cutAtTheRecord = async (taskId: string, cancel?: string) => {
    const sum = { goal: 'add', input: { numbers: [4, 5] }, id: taskId };
    expect((await call('POST', '/v1/pipelines/summing/tasks', sum)).status).toBe(202);
    if (cancel)
      expect((await call('POST', `/v1/tasks/${taskId}/cancel`, { reason: cancel })).status).toBe(200);
    const proxy = await cutAfterWrite(h.nats.port, `$KV.${BUCKETS.workflows}.${taskId}`, () => true);
    proxies.push(proxy);
    // The task is waiting before the coordinator starts, so the cut may come while it still starts (its consumers
    // take tasks before it registers its pipeline): a start that fails then fails because of the cut.
    const starting = coordinatorAt(proxy.url, `cut-${taskId}`).catch((error: unknown) => {
      if (proxy.isCut()) return async () => undefined;
      throw error;
    });
    await Promise.race([proxy.cut, starting]);
    await proxy.cut;
    const stopCut = await starting;
    // What it left: the record, and the mark it had not taken yet.
    expect(await marked(taskId)).not.toBeNull();
    await stopCut();
  };

  it('runs the task once on the next coordinator, which takes the mark', async () => {
    await cutAtTheRecord('qc-run-1');
    expect((await call('GET', '/v1/tasks/qc-run-1')).body).toMatchObject({ status: 'running' });
    const stopNext = await coordinatorAt(h.nats.url, 'next-1');
    const final = await h.finalOf('qc-run-1', 30_000);
    expect(final.kind).toBe('task.completed');
    expect(kinds(h.eventsOf('qc-run-1')).filter((k) => k === 'task.completed')).toHaveLength(1);
    await expect.poll(() => marked('qc-run-1')).toBeNull();
    expect((await call('GET', '/v1/tasks?status=submitted')).body.tasks).toEqual([]);
    await stopNext();
  }, 90_000);

  it('ends a task cancelled while queued on the next coordinator, running none of its steps', async () => {
    await cutAtTheRecord('qc-cancel-1', 'changed my mind');
    await coordinatorAt(h.nats.url, 'next-2');
    const final = await h.finalOf('qc-cancel-1', 30_000);
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('changed my mind (token ops)');
    expect(kinds(h.eventsOf('qc-cancel-1')).filter((k) => k.startsWith('step.'))).toEqual([]);
    expect((await call('GET', '/v1/tasks/qc-cancel-1')).body).toMatchObject({ status: 'cancelled' });
  }, 90_000);
});
