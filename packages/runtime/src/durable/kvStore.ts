import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { BUCKETS } from '@troupe/protocol';
import pRetry from 'p-retry';
import type { z } from 'zod';
import type { JetStreamBus } from '../transport/bus.ts';
import { isApiError, kvOf, type TroupeBucket } from '../transport/jetstreamSetup.ts';
import { natsConnectionOf } from '../transport/natsBus.ts';
import { TransportError } from '../transport/transportError.ts';
import {
  CONNECTION_ERRORS,
  isPermissionRefusal,
  UNREACHABLE_API_CODES,
  type UntilReachableOptions,
  untilReachable,
} from '../transport/untilReachable.ts';
import { checkedOwnValue, strictOwnValues } from './ownValues.ts';

/**
 * Runs a KV operation, trying it again (backing off up to 2 s, about 10 s in all) while NATS cannot be reached:
 * long enough to wait out a nats-server restart or a reconnect. Only {@link isOutage} failures are tried again.
 */
export async function throughOutages<T>(op: () => Promise<T>): Promise<T> {
  // Nearly every operation succeeds at once: only one that met an outage pays for the retry machinery.
  try {
    return await op();
  } catch (error) {
    if (!isOutage(error)) throw error;
  }
  // The same schedule as one p-retry run from the start: 250 ms, then doubling up to 2 s, 9 tries in all.
  await new Promise((resolve) => setTimeout(resolve, FIRST_RETRY_MS));
  return pRetry(op, {
    retries: 7,
    minTimeout: FIRST_RETRY_MS * 2,
    maxTimeout: 2_000,
    shouldRetry: ({ error }) => isOutage(error),
  });
}

const FIRST_RETRY_MS = 250;

/**
 * nats.js errors of a slow, lost or restarting server, which a reconnect cures: those of a slow or lost
 * connection, and those of a server that does not serve JetStream yet.
 */
const OUTAGE_ERRORS = new Set([
  ...CONNECTION_ERRORS,
  'NoRespondersError',
  'JetStreamNotEnabled',
  'JetStreamStatusError',
]);
/**
 * JetStream API answers that pass: those of a system or cluster that cannot take the request now, and the stream
 * is not found (10059), as a restarted server says until it has recovered its streams.
 */
const OUTAGE_API_CODES = new Set([...UNREACHABLE_API_CODES, JetStreamApiCodes.StreamNotFound]);

/**
 * Whether a failure may pass once NATS is reachable again: a timeout, a lost connection, a server that is
 * restarting. Anything else (a value over the server's max_payload, one that fails its schema or cannot be
 * encoded, a closed connection, a fault of the code) would fail the same way every time.
 */
export function isOutage(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return OUTAGE_API_CODES.has(error.code);
  if (isPermissionRefusal(error)) return false;
  return error instanceof Error && OUTAGE_ERRORS.has(error.name);
}

/** An entry read back with the revision it was stored at. */
export interface KvEntry<T> {
  key: string;
  value: T;
  revision: number;
}

/**
 * A KV bucket of typed values, as Troupe's parts use one: {@link KvStore} over NATS, `MemoryKv` in
 * `@troupe/testkit` for unit tests. Writes that compare (`create`, `update`) return undefined when they lose.
 */
export interface KeyValue<T> {
  get(key: string): Promise<KvEntry<T> | undefined>;
  /** Stores a value; returns its revision. */
  put(key: string, value: T): Promise<number>;
  /** Stores a value only if the key is absent; returns undefined when it was already there. */
  create(key: string, value: T): Promise<number | undefined>;
  /** Stores a value only if the key is still at `revision`; returns undefined when someone wrote it since. */
  update(key: string, value: T, revision: number): Promise<number | undefined>;
  delete(key: string): Promise<void>;
  /** Every key, or those matching `filter` (NATS wildcards: `*` one token, `>` the rest, e.g. `task-1.>`). */
  keys(filter?: string): Promise<string[]>;
  /**
   * Calls `onValue` with the key's current value, then with later values as they are seen, until the returned
   * function is called. A value written and replaced between two looks may be missed: watchers want the latest.
   */
  watch(key: string, onValue: (entry: KvEntry<T>) => void): Promise<() => void>;
}

/**
 * Buckets read directly from any replica. Every write to `approvals` compares revisions and every waiter also
 * watches the record, so a replica behind the leader costs a lost compare, never a wrong decision; and a direct get
 * names its key in its subject, where the broker's permissions can keep each pipeline to its own requests.
 */
const READ_ANY_REPLICA: ReadonlySet<string> = new Set([BUCKETS.approvals]);

/**
 * Buckets whose values only Troupe's own code writes, from what it holds typed by their schemas and parsed where it
 * arrived (a task message, an agent's reply): the workflow records and the step journal, written on every step. A
 * write to them is not parsed again (in tests it is, strictly: {@link strictOwnValues}); a read still is, so a value
 * from elsewhere (an older version, a hand-made put) is refused as it always was. Every other bucket parses its
 * writes: their values may carry what a person or a client sent (approvals, sessions, push configs).
 */
const OWN_RECORDS: ReadonlySet<string> = new Set([BUCKETS.workflows, BUCKETS.journal]);

/**
 * nats-server's answers to a write that expected another last revision of the key: 10071, and 10164 from a cluster
 * (2.11 and later) while another write to the key is still being applied.
 */
const LOST_COMPARE: readonly number[] = [
  JetStreamApiCodes.StreamWrongLastSequence,
  JetStreamApiCodes.StreamWrongLastSequenceUnknown,
];
export const lostCompare = (error: unknown): boolean => LOST_COMPARE.some((code) => isApiError(error, code));

/** How often a watched key is read again: soon after it changed, then less often, down to every 5 s. */
export const WATCH_POLL = { firstMs: 500, maxMs: 5_000 } as const;

/** A JetStream manager per connection, for listing keys: one `$JS.API.INFO` check, not one per listing. */
const managers = new WeakMap<JetStreamBus, Promise<JetStreamManager>>();

/**
 * The keys of a bucket that match `filter`, from the list of subjects its stream keeps, without making a consumer:
 * a user that may create consumers could aim their deliveries at any subject (nats-server checks no permission on a
 * push consumer's deliver subject), so Troupe's users get none on the buckets. A deleted key is listed until the
 * bucket is compacted; reading it gives nothing.
 */
export async function listKeys(bus: JetStreamBus, bucket: string, filter = '>'): Promise<string[]> {
  const prefix = `$KV.${bucket}.`;
  let jsm = managers.get(bus);
  if (jsm === undefined) {
    jsm = jetstreamManager(natsConnectionOf(bus), { checkAPI: false });
    managers.set(bus, jsm);
  }
  const info = await (await jsm).streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}${filter}` });
  return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
}

/**
 * The keys of `store` under `<prefix>.`, seen without the prefix: what one pipeline's parts may touch, when the
 * broker's permissions allow only that part of a bucket (`approvals` and `journal` are kept by pipeline).
 */
export function underPrefix<T>(store: KeyValue<T>, prefix: string): KeyValue<T> {
  const full = (key: string) => `${prefix}.${key}`;
  const short = <E extends { key: string }>(entry: E): E => ({
    ...entry,
    key: entry.key.slice(prefix.length + 1),
  });
  return {
    get: async (key) => {
      const entry = await store.get(full(key));
      return entry && short(entry);
    },
    put: (key, value) => store.put(full(key), value),
    create: (key, value) => store.create(full(key), value),
    update: (key, value, revision) => store.update(full(key), value, revision),
    delete: (key) => store.delete(full(key)),
    keys: async (filter = '>') => (await store.keys(full(filter))).map((key) => key.slice(prefix.length + 1)),
    watch: (key, onValue) => store.watch(full(key), (entry) => onValue(short(entry))),
  };
}

/**
 * How a bucket is read. `anyReplica`: by a direct get that any replica may answer, a little behind the leader, as a
 * reader of records that no longer change can (a dataset's copy of an ended task's journal); its subject names the
 * key, so the broker's permissions can keep the reader to a part of the bucket at every replica count.
 */
export interface KvReads {
  anyReplica?: boolean;
}

/**
 * Opens an existing bucket, waiting (logging each wait) while NATS cannot be reached; fails at once with
 * `bucket_missing` when no coordinator has created it on this server. Reads go straight to the stream when it allows
 * (a get through the JetStream API also costs an advisory, and names no key the broker's permissions could check).
 */
export async function openKv(
  bus: JetStreamBus,
  bucket: TroupeBucket,
  wait?: UntilReachableOptions,
  reads: KvReads = {},
): Promise<KV> {
  const kv = await kvOf(bus, bucket);
  let direct: boolean;
  try {
    const status = await untilReachable(bus, `KV bucket ${bucket}`, () => kv.status(), wait);
    // Replicas may answer a direct get while behind the leader; claims and fencing need the latest value, so
    // only a bucket with one copy reads directly, or one whose stale read is harmless (see READ_ANY_REPLICA).
    const { allow_direct, num_replicas } = status.streamInfo.config;
    direct =
      allow_direct === true &&
      (num_replicas <= 1 || READ_ANY_REPLICA.has(bucket) || reads.anyReplica === true);
  } catch (cause) {
    // Only a missing stream means a missing bucket; a timeout or a lost connection is not that.
    if (!isApiError(cause, JetStreamApiCodes.StreamNotFound)) throw cause;
    throw new TransportError('bucket_missing', `the KV bucket ${bucket} does not exist on this NATS server`, {
      cause,
    });
  }
  return direct ? kvOf(bus, bucket, true) : kv;
}

/**
 * A typed view of one of Troupe's KV buckets: values are JSON validated by a zod schema on the way in and
 * out. A stored value that no longer parses is reported as absent with a logged warning, never thrown.
 */
export class KvStore<S extends z.ZodType> implements KeyValue<z.infer<S>> {
  readonly #kv: KV;
  readonly #schema: S;
  readonly #bus: JetStreamBus;

  readonly #bucket: string;
  /** Whether writes are parsed, and whether strictly: see {@link OWN_RECORDS}. */
  readonly #writes: 'parsed' | 'trusted' | 'strict';

  private constructor(kv: KV, bucket: string, schema: S, bus: JetStreamBus) {
    this.#bucket = bucket;
    this.#writes = !OWN_RECORDS.has(bucket) ? 'parsed' : strictOwnValues() ? 'strict' : 'trusted';
    this.#kv = kv;
    this.#schema = schema;
    this.#bus = bus;
  }

  /**
   * Opens an existing bucket, waiting (logging each wait) while NATS cannot be reached; fails at once with
   * `bucket_missing` when no coordinator has created it on this server.
   */
  static async open<S extends z.ZodType>(
    bus: JetStreamBus,
    bucket: TroupeBucket,
    schema: S,
    wait?: UntilReachableOptions,
    reads?: KvReads,
  ): Promise<KvStore<S>> {
    return new KvStore(await openKv(bus, bucket, wait, reads), bucket, schema, bus);
  }

  async get(key: string): Promise<KvEntry<z.infer<S>> | undefined> {
    const entry = await this.#kv.get(key);
    if (entry?.operation !== 'PUT' || entry.length === 0) return undefined;
    const json = jsonOf(entry);
    if (!json.ok) {
      // Bytes no Troupe writer stores (a hand-made put, a broken client): a reader must not fail on them.
      this.#bus.logger.warn({ key, error: json.error }, 'ignoring a KV value that is not JSON');
      return undefined;
    }
    const parsed = this.#schema.safeParse(json.value);
    if (!parsed.success) {
      this.#bus.logger.warn(
        { key, issues: parsed.error.issues },
        'ignoring a KV value that does not match its schema',
      );
      return undefined;
    }
    return { key, value: parsed.data, revision: entry.revision };
  }

  /** Stores a value; returns its revision. */
  async put(key: string, value: z.infer<S>): Promise<number> {
    return this.#kv.put(key, this.#encode(key, value));
  }

  /** Stores a value only if the key is absent; returns undefined when it was already there. */
  async create(key: string, value: z.infer<S>): Promise<number | undefined> {
    const data = this.#encode(key, value);
    try {
      return await this.#kv.create(key, data);
    } catch (error) {
      // The server's own answer that the key is there; else look (a read from a replica may lag, the answer not).
      if (lostCompare(error) || (await this.#kv.get(key))) return undefined;
      throw error;
    }
  }

  /** Stores a value only if the key is still at `revision`; returns undefined when someone wrote it since. */
  async update(key: string, value: z.infer<S>, revision: number): Promise<number | undefined> {
    const data = this.#encode(key, value);
    try {
      return await this.#kv.update(key, data, revision);
    } catch (error) {
      if (lostCompare(error)) return undefined;
      if ((await this.#kv.get(key))?.revision !== revision) return undefined;
      throw error;
    }
  }

  /**
   * Calls `onValue` with the key's current value, then with each value written to it, until the returned
   * function is called. Values that do not match the schema are skipped.
   */
  async watch(key: string, onValue: (entry: KvEntry<z.infer<S>>) => void): Promise<() => void> {
    // Read, not a consumer: a user that may create consumers could aim their deliveries at any subject (nats-server
    // checks no permission on a push consumer's deliver subject), so Troupe's users get none on the buckets.
    let seen = 0;
    let waitMs: number = WATCH_POLL.firstMs;
    let failing = false;
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const connection = natsConnectionOf(this.#bus);
    const look = async () => {
      try {
        const entry = await this.#kv.get(key);
        failing = false;
        if (entry?.operation === 'PUT' && entry.length > 0 && entry.revision > seen) {
          seen = entry.revision;
          waitMs = WATCH_POLL.firstMs;
          // A value that is not JSON or does not match the schema is skipped, once.
          const json = jsonOf(entry);
          const parsed = json.ok ? this.#schema.safeParse(json.value) : undefined;
          if (parsed?.success) onValue({ key, value: parsed.data, revision: entry.revision });
        } else {
          waitMs = Math.min(waitMs * 2, WATCH_POLL.maxMs);
        }
      } catch (error) {
        if (!failing && !connection.isClosed() && !connection.isDraining()) {
          this.#bus.logger.warn({ err: error, key }, 'cannot read a watched KV key; trying again');
        }
        failing = true;
        waitMs = WATCH_POLL.maxMs;
      }
      // Nothing to read once the connection is closed; and a watch alone keeps no process alive.
      if (!stopped && !connection.isClosed()) timer = setTimeout(look, waitMs).unref();
    };
    await look();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  /**
   * The value as JSON text, checked against the schema unless Troupe's own code built it (see {@link OWN_RECORDS}).
   * A value JSON cannot encode (nested too deep, circular) fails with `unencodable`: storing it again would fail the
   * same way, so nothing retries it.
   */
  #encode(key: string, value: z.infer<S>): string {
    const checked =
      this.#writes === 'trusted'
        ? value
        : checkedOwnValue(this.#schema, value, `${this.#bucket} ${key}`, this.#writes === 'strict');
    try {
      return JSON.stringify(checked);
    } catch (cause) {
      throw new TransportError(
        'unencodable',
        `cannot store ${key}: its value cannot be encoded as JSON (${(cause as Error).message})`,
        { cause },
      );
    }
  }

  async delete(key: string): Promise<void> {
    await this.#kv.delete(key);
  }

  /** Every key, or those matching `filter` (NATS wildcards: `*` one token, `>` the rest, e.g. `task-1.>`). */
  async keys(filter?: string): Promise<string[]> {
    return listKeys(this.#bus, this.#bucket, filter);
  }
}

/** A stored value's JSON, or why it is none. */
function jsonOf(entry: { json<T>(): T }): { ok: true; value: unknown } | { ok: false; error: string } {
  try {
    return { ok: true, value: entry.json<unknown>() };
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}
