import { isDeepStrictEqual } from 'node:util';
import type { TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { throughOutages } from '@troupe/runtime';
import type { ClaimedTask } from '../intake/claim.ts';
import { isoNow, type TaskServices } from './taskServices.ts';

/** A write of the task's record under this delivery's lease: the new revision, or `lost` when another owns it now. */
export type FencedWrite = { written: true; revision: number } | { written: false };

/** A lease as a write needs it: its token, and the record revision this delivery last wrote. */
export interface LeaseMark {
  token: string;
  revision: number;
}

type RecordServices = Pick<TaskServices, 'store' | 'logger' | 'bus'>;

/**
 * Writes the record only if it is still as this delivery last left it. A conflict means another coordinator took
 * the task over (this one was cut off longer than the ack wait), unless the record bears this lease's token: then a
 * write of this delivery's own landed with its reply lost. That write may be this one, or an earlier one given up
 * on (NATS out of reach past every retry): then this record is written over it, at the revision it left, since the
 * task is still this delivery's. Retried through outages; throws what is not one.
 *
 * The task's open batch of events is sent first (`Bus.sendOpenEvents`), on the same connection: the server has the
 * events the workflow made (entering a state, which a run restored from this record does not do again) before it.
 */
export async function fencedWrite(
  { store, logger, bus }: RecordServices,
  taskId: string,
  lease: LeaseMark,
  value: WorkflowRecord,
): Promise<FencedWrite> {
  bus.sendOpenEvents?.(value.pipeline, taskId);
  let revision = lease.revision;
  // Bounded: each round needs a write of ours to land unseen, and only the writes of one delivery can bear its token.
  for (let round = 0; round < OWN_WRITE_ROUNDS; round++) {
    const written = await throughOutages(() => store.update(taskId, value, revision));
    if (written !== undefined) return { written: true, revision: written };
    const current = await throughOutages(() => store.get(taskId));
    if (current?.value.lease !== lease.token) break;
    if (isDeepStrictEqual(current.value, value)) return { written: true, revision: current.revision };
    revision = current.revision;
  }
  logger.warn({ taskId }, `task ${taskId} was taken over by another coordinator; stopping it here`);
  return { written: false };
}

/** How many times a write finds an unseen write of its own delivery in its place before it gives up on the task. */
const OWN_WRITE_ROUNDS = 3;

/** The parts of a record a checkpoint sets; the rest is the task's, from its claim. */
export type RecordFields = Pick<
  WorkflowRecord,
  | 'status'
  | 'state'
  | 'round'
  | 'usage'
  | 'snapshot'
  | 'final'
  | 'activity'
  | 'paused'
  | 'pausedMs'
  | 'told'
  | 'toldCount'
  | 'toldKeys'
  | 'toldOwed'
>;

/** The record as this delivery writes it: the task, its claim and progress, and `fields` (where the workflow is). */
export function recordOf(
  { clock }: Pick<TaskServices, 'clock'>,
  claimed: ClaimedTask,
  progress: number,
  fields: RecordFields,
): WorkflowRecord {
  const { input, delivery, lease } = claimed;
  return {
    taskId: input.taskId,
    pipeline: input.pipeline,
    streamSequence: delivery.streamSequence,
    goal: input.goal,
    ...(input.metadata ? { metadata: input.metadata } : {}),
    ...(input.origin ? { origin: input.origin } : {}),
    createdAt: claimed.createdAt,
    updatedAt: isoNow(clock),
    lease: lease.token,
    progress,
    delivery: lease.delivery,
    ...(claimed.version === undefined ? {} : { version: claimed.version }),
    ...definedOnly(fields),
  };
}

/** A failure record with its final event, written under the lease; false when another coordinator owns the task. */
export async function recordFailure(
  services: RecordServices & Pick<TaskServices, 'clock'>,
  claimed: ClaimedTask,
  lease: LeaseMark,
  progress: number,
  final: TroupeEvent,
  context: Pick<WorkflowRecord, 'usage' | 'round'>,
): Promise<boolean> {
  const { taskId } = claimed.input;
  const record = recordOf(services, claimed, progress, {
    status: 'failed',
    state: 'failed',
    round: context.round,
    usage: context.usage,
    final,
  });
  return fencedWrite(services, taskId, lease, record).then(
    (write) => write.written,
    (error: unknown) => {
      services.logger.error({ err: error, taskId }, `cannot record that task ${taskId} failed`);
      // Concluded anyway: its final event still goes out, and a redelivery finds the task running and fails it again.
      return true;
    },
  );
}

/** Shutdown or a migration: the task goes back to NATS, to be resumed from its checkpoint (on `version`, if given). */
export async function recordHandBack(
  services: RecordServices,
  taskId: string,
  lease: LeaseMark,
  version?: string,
): Promise<boolean> {
  return throughOutages(() => services.store.get(taskId))
    .then(async (current) => {
      const delivery = current?.value.delivery;
      // A record from before deliveries were tracked has nothing to mark, but a migration still names its version.
      if (current === undefined || (delivery === undefined && version === undefined)) return false;
      // A clean stop is not a failure to make progress: the next delivery does not count this one.
      const write = await fencedWrite(services, taskId, lease, {
        ...current.value,
        ...(delivery === undefined ? {} : { delivery: { ...delivery, handedBack: true } }),
        ...(version === undefined ? {} : { version }),
      });
      return write.written;
    })
    .catch((error: unknown) => {
      services.logger.warn({ err: error, taskId }, 'cannot record the hand-back');
      return false;
    });
}

function definedOnly<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
