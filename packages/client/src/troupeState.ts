import { BUCKETS, HumanRequest, WorkflowRecord } from '@troupe/protocol';
import {
  type JetStreamBus,
  KvStore,
  mapLimit,
  TransportError,
  type TroupeBucket,
  type UntilReachableOptions,
} from '@troupe/runtime/bus';
import type { z } from 'zod';
import { OperationError } from './operationError.ts';

/** How long a client waits for a server in trouble before it says so: clients answer people, who should not wait. */
export const CLIENT_WAIT: UntilReachableOptions = { outageMs: 5_000, noJetStreamMs: 2_000 };

/** A KV bucket; a server no coordinator has used has none, which is said plainly (`no_coordinator`). */
export async function openBucket<S extends z.ZodType>(
  bus: JetStreamBus,
  bucket: TroupeBucket,
  schema: S,
  wait: UntilReachableOptions = CLIENT_WAIT,
): Promise<KvStore<S>> {
  try {
    return await KvStore.open(bus, bucket, schema, wait);
  } catch (error) {
    if (TransportError.is(error, 'bucket_missing')) {
      throw new OperationError(
        'no_coordinator',
        `no Troupe coordinator has run on this server yet (${(error as Error).message})`,
        { cause: error },
      );
    }
    throw new OperationError('unavailable', (error as Error).message, { cause: error });
  }
}

/** A KV bucket, or undefined when no coordinator has made it on this server. */
export async function bucketIfAny<S extends z.ZodType>(
  bus: JetStreamBus,
  bucket: TroupeBucket,
  schema: S,
  wait: UntilReachableOptions = CLIENT_WAIT,
): Promise<KvStore<S> | undefined> {
  try {
    return await openBucket(bus, bucket, schema, wait);
  } catch (error) {
    if (OperationError.is(error, 'no_coordinator')) return undefined;
    throw error;
  }
}

export type WorkflowStore = KvStore<typeof WorkflowRecord>;
export type HumanRequestStore = KvStore<typeof HumanRequest>;

export const openWorkflowStore = (bus: JetStreamBus, wait?: UntilReachableOptions): Promise<WorkflowStore> =>
  openBucket(bus, BUCKETS.workflows, WorkflowRecord, wait);

export const openHumanRequests = (
  bus: JetStreamBus,
  wait?: UntilReachableOptions,
): Promise<HumanRequestStore> => openBucket(bus, BUCKETS.approvals, HumanRequest, wait);

/** KV `workflows`, or undefined when no coordinator has run on the server. */
export const workflowStoreIfAny = (bus: JetStreamBus): Promise<WorkflowStore | undefined> =>
  bucketIfAny(bus, BUCKETS.workflows, WorkflowRecord);

/** Reads this many records at once: a server far away answers a thousand tasks in seconds, not minutes. */
const PARALLEL_READS = 32;

/** The values of these keys (every key by default) that exist and parse, in no particular order. */
export async function readValues<S extends z.ZodType>(
  store: KvStore<S>,
  keys?: string[],
): Promise<z.infer<S>[]> {
  const entries = await mapLimit(keys ?? (await store.keys()), PARALLEL_READS, (key) => store.get(key));
  return entries.flatMap((entry) => (entry ? [entry.value] : []));
}
