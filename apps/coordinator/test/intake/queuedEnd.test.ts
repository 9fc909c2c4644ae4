import { QUEUED_MARK_HEADER, QueuedTask, type WorkflowRecord } from '@troupe/protocol';
import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { claim } from '../../src/intake/claim.ts';
import { giveUp } from '../../src/intake/giveUp.ts';
import { triage } from '../../src/intake/triage.ts';
import { compileFlow } from '../../src/workflow/compileFlow.ts';
import { FlowVersions } from '../../src/workflow/flowVersions.ts';
import { config, deliveryOf, intakeServices, V1 } from './taskServices.ts';

const AT = '2026-12-06T10:00:00.000Z';
const mark = (taskId: string): QueuedTask => ({
  taskId,
  pipeline: 'unit',
  goal: 'g',
  metadata: { ticket: 'T-1' },
  submittedAt: AT,
});
/** What the gateway's publish carries: the task id as `Nats-Msg-Id`, and the header saying it marked the task. */
const headersOf = (taskId: string) => ({ 'Nats-Msg-Id': taskId, [QUEUED_MARK_HEADER]: '1' });

function withQueued(options: { maxDeliver?: number } = {}) {
  const intake = intakeServices(options);
  const queued = new MemoryKv(QueuedTask);
  return { ...intake, queued, services: { ...intake.services, queued } };
}

const ended = (taskId: string, streamSequence: number, status: WorkflowRecord['status']): WorkflowRecord => ({
  taskId,
  pipeline: 'unit',
  streamSequence,
  status,
  state: status === 'running' ? 'plan' : status,
  goal: 'g',
  round: 1,
  usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
  createdAt: AT,
  updatedAt: AT,
});

describe('a queued task that triage refuses', () => {
  it('over the coordinator’s maxTaskBytes: ends failed (refused) with the reason, and its mark goes', async () => {
    const { services, queued, store, bus } = withQueued();
    services.limits = { ...services.limits, maxTaskBytes: 64 };
    await queued.create('big-1', mark('big-1'));
    const payload = { id: 'big-1', goal: 'g', input: { text: 'x'.repeat(200) } };
    const triaged = await triage(services, deliveryOf(payload, { headers: headersOf('big-1') }));
    expect(triaged).toMatchObject({
      next: 'conclude',
      final: {
        kind: 'task.failed',
        taskId: 'big-1',
        data: { reason: 'refused', message: expect.stringContaining('--max-task-bytes') },
      },
    });
    expect((await store.get('big-1'))?.value).toMatchObject({
      status: 'failed',
      goal: 'g',
      metadata: { ticket: 'T-1' },
      final: { kind: 'task.failed', data: { reason: 'refused' } },
    });
    expect(await queued.get('big-1')).toBeUndefined();
    // Still reported on _invalid, where an operator looks for refusals.
    await bus.settled();
    expect(bus.messages.some((m) => m.subject === 'troupe.events._invalid')).toBe(true);
    // Delivered again (its coordinator died before settling it): the same end, the same event id.
    const again = await triage(
      services,
      deliveryOf(payload, { headers: headersOf('big-1'), deliveryCount: 2 }),
    );
    expect(again).toMatchObject({ next: 'conclude' });
    expect(again.next === 'conclude' && again.final.id).toBe(triaged.next === 'conclude' && triaged.final.id);
  });

  it('with a stored input it cannot read: ends failed (refused), and its mark goes', async () => {
    const { services, queued, store } = withQueued();
    await queued.create('ref-1', mark('ref-1'));
    const inputRef = { bucket: 'troupe-values-unit', name: 'task-input', bytes: 10, sha256: 'a'.repeat(64) };
    const triaged = await triage(
      services,
      deliveryOf({ id: 'ref-1', goal: 'from the ref', inputRef }, { headers: headersOf('ref-1') }),
    );
    expect(triaged).toMatchObject({
      next: 'conclude',
      final: {
        kind: 'task.failed',
        data: { reason: 'refused', message: expect.stringContaining('stored inputs') },
      },
    });
    expect((await store.get('ref-1'))?.value).toMatchObject({ status: 'failed', goal: 'from the ref' });
    expect(await queued.get('ref-1')).toBeUndefined();
  });

  it('whose input does not fit the newest version’s input schema: ends failed (refused), and its mark goes', async () => {
    const { services, queued, store } = withQueued();
    const schema = { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] };
    services.versions = new FlowVersions({
      pipeline: 'unit',
      config: { ...config, input: schema },
      hash: V1,
      compile: (versionConfig) => compileFlow(versionConfig),
      source: {},
      logger: services.logger,
    });
    await queued.create('fit-1', mark('fit-1'));
    const triaged = await triage(
      services,
      deliveryOf({ id: 'fit-1', goal: 'g', input: { n: 'one' } }, { headers: headersOf('fit-1') }),
    );
    expect(triaged).toMatchObject({
      next: 'conclude',
      final: {
        kind: 'task.failed',
        data: { reason: 'refused', message: expect.stringContaining('refused') },
      },
    });
    expect((await store.get('fit-1'))?.value.status).toBe('failed');
    expect(await queued.get('fit-1')).toBeUndefined();
  });

  it('is refused as before, with no record, when it has no mark (a plain NATS client)', async () => {
    const { services, queued, store } = withQueued();
    services.limits = { ...services.limits, maxTaskBytes: 64 };
    const payload = { id: 'big-2', goal: 'g', input: { text: 'x'.repeat(200) } };
    expect(await triage(services, deliveryOf(payload, { headers: { 'Nats-Msg-Id': 'big-2' } }))).toEqual({
      next: 'refuse',
    });
    expect(await store.get('big-2')).toBeUndefined();
    expect(queued.gets).toBe(0);
  });

  it("leaves another pipeline's mark of the same id alone, refusing as before", async () => {
    const { services, queued, store } = withQueued();
    services.limits = { ...services.limits, maxTaskBytes: 64 };
    await queued.create('big-3', { ...mark('big-3'), pipeline: 'other' });
    const payload = { id: 'big-3', goal: 'g', input: { text: 'x'.repeat(200) } };
    expect(await triage(services, deliveryOf(payload, { headers: headersOf('big-3') }))).toEqual({
      next: 'refuse',
    });
    expect(await store.get('big-3')).toBeUndefined();
    expect((await queued.get('big-3'))?.value.pipeline).toBe('other');
  });
});

describe('a queued task whose mark cannot be read', () => {
  it('comes back while it may still run, and is given up on at maxDeliver, its mark deleted', async () => {
    const { services, queued, store, deadLetters } = withQueued({ maxDeliver: 3 });
    await queued.create('gone-1', mark('gone-1'));
    const get = queued.get.bind(queued);
    queued.get = async () => {
      throw new Error('stream not found');
    };
    const delivery = (deliveryCount: number) =>
      deliveryOf({ id: 'gone-1', goal: 'g' }, { headers: headersOf('gone-1'), deliveryCount });
    await expect(triage(services, delivery(3))).rejects.toThrow('stream not found');
    const triaged = await triage(services, delivery(4));
    if (triaged.next !== 'giveUp') throw new Error(`triaged as ${triaged.next}`);
    // Readable again by the time it is given up on (the bucket was made again, say): the mark is deleted.
    queued.get = get;
    expect(await giveUp(services, triaged.task)).toMatchObject({
      next: 'conclude',
      final: { kind: 'task.failed', data: { reason: 'max_deliveries' } },
    });
    expect((await store.get('gone-1'))?.value.status).toBe('failed');
    expect(deadLetters).toHaveLength(1);
    expect(await queued.get('gone-1')).toBeUndefined();
  });

  it('deletes the mark triage read when the task is given up on', async () => {
    const { services, queued } = withQueued({ maxDeliver: 3 });
    await queued.create('slow-1', mark('slow-1'));
    const triaged = await triage(
      services,
      deliveryOf({ id: 'slow-1', goal: 'g' }, { headers: headersOf('slow-1'), deliveryCount: 4 }),
    );
    if (triaged.next !== 'giveUp') throw new Error(`triaged as ${triaged.next}`);
    expect(triaged.task.queued).toBeDefined();
    await giveUp(services, triaged.task);
    expect(await queued.get('slow-1')).toBeUndefined();
  });
});

describe('a resubmission of a task id, marked queued', () => {
  it('has its mark deleted when the task of that id has ended, at triage or at the claim', async () => {
    const { services, queued, store } = withQueued();
    // Found by triage (a redelivery reads the record).
    await store.create('re-1', ended('re-1', 1, 'completed'));
    await queued.create('re-1', mark('re-1'));
    const redelivered = deliveryOf(
      { id: 're-1', goal: 'g' },
      { headers: headersOf('re-1'), streamSequence: 7, deliveryCount: 2 },
    );
    expect(await triage(services, redelivered)).toEqual({ next: 'ack' });
    expect(await queued.get('re-1')).toBeUndefined();
    // Found by the claim (a first delivery reads no record).
    await store.create('re-2', ended('re-2', 1, 'failed'));
    await queued.create('re-2', mark('re-2'));
    const first = await triage(
      services,
      deliveryOf({ id: 're-2', goal: 'g' }, { headers: headersOf('re-2'), streamSequence: 8 }),
    );
    if (first.next !== 'claim') throw new Error(`triaged as ${first.next}`);
    expect(await claim(services, first.task)).toEqual({ next: 'ack' });
    expect(await queued.get('re-2')).toBeUndefined();
  });

  it('leaves the mark while the task of that id runs: its own claim may still have to take it', async () => {
    const { services, queued, store } = withQueued();
    await store.create('re-3', ended('re-3', 1, 'running'));
    await queued.create('re-3', mark('re-3'));
    const redelivered = deliveryOf(
      { id: 're-3', goal: 'g' },
      { headers: headersOf('re-3'), streamSequence: 9, deliveryCount: 2 },
    );
    expect(await triage(services, redelivered)).toEqual({ next: 'ack' });
    expect(await queued.get('re-3')).toBeDefined();
  });
});
