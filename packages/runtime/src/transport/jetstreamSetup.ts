import { setTimeout as sleep } from 'node:timers/promises';
import {
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { nanos } from '@nats-io/transport-node';
import { BUCKETS, errorMessage, STREAMS, subjects } from '@troupe/protocol';
import pRetry from 'p-retry';
import type { JetStreamBus } from './bus.ts';
import { natsConnectionOf } from './natsBus.ts';
import { TransportError } from './transportError.ts';
import { type UntilReachableOptions, untilReachable } from './untilReachable.ts';

export interface TroupeStreamsOptions {
  /** How long submitted tasks are kept, in milliseconds; default 7 days. */
  tasksMaxAge?: number;
  /** How long events are kept, in milliseconds; default 7 days. */
  eventsMaxAge?: number;
  /** The most bytes of events kept (the oldest go first); default no limit. */
  eventsMaxBytes?: number;
  /** Window in which a message with a repeated `Nats-Msg-Id` is dropped, in milliseconds; default 2 minutes. */
  duplicateWindowMs?: number;
  /**
   * How many servers of a JetStream cluster keep each stream and bucket (1–5; 3 in a three-node cluster). Set on a
   * stream that exists, it changes the stream's; a bucket keeps the count it was made with. Default 1.
   */
  replicas?: number;
  /** How long set-up waits for NATS and JetStream through an outage before it gives up. */
  wait?: UntilReachableOptions;
}

export type TroupeBucket = (typeof BUCKETS)[keyof typeof BUCKETS];

const DAY_MS = 24 * 60 * 60 * 1000;
const DEFAULTS = {
  tasksMaxAge: 7 * DAY_MS,
  eventsMaxAge: 7 * DAY_MS,
  eventsMaxBytes: -1,
  duplicateWindowMs: 2 * 60 * 1000,
};
/** Another process may create the same stream between our look and our write; we look again up to this often. */
const RACE_RETRIES = 2;
/** 10058: "stream name already in use with a different configuration". */
const STREAM_NAME_IN_USE = 10058;

type TroupeStreamConfig = Pick<
  StreamConfig,
  | 'name'
  | 'subjects'
  | 'retention'
  | 'storage'
  | 'max_age'
  | 'max_bytes'
  | 'duplicate_window'
  | 'discard'
  | 'num_replicas'
>;

/** The limits of a stream that set-up changes on a stream that exists: only those the caller gave. */
type Limits = Partial<Pick<StreamConfig, 'max_age' | 'max_bytes' | 'duplicate_window' | 'num_replicas'>>;

/**
 * Creates the streams `TASKS`, `EVENTS` and `DEADLETTER` and the KV buckets, or brings their subjects up to date.
 * A stream is created with the given limits (else the defaults); on a stream that exists, only the limits given
 * here are changed, so a process started without them (a second coordinator) keeps what the first one set.
 * Safe to call on every start, and from several processes at once. Uses only what nats-server 2.9 supports.
 * Waits (logging each wait) while NATS cannot be reached; see {@link untilReachable}.
 */
export async function ensureTroupeStreams(bus: JetStreamBus, opts: TroupeStreamsOptions = {}): Promise<void> {
  const { wait, replicas, ...given } = opts;
  const settings = { ...DEFAULTS, ...definedOnly(given) };
  const copies = replicas ?? 1;
  const replicated = (config: TroupeStreamConfig): TroupeStreamConfig => ({
    ...config,
    num_replicas: copies,
  });
  const withReplicas = (limits: Limits): Limits =>
    replicas === undefined ? limits : { ...limits, num_replicas: replicas };
  const jsm = await jetstreamManagerOf(bus, wait);
  const window = given.duplicateWindowMs;
  const streams: [TroupeStreamConfig, Limits][] = [
    [
      replicated(
        streamConfig(STREAMS.tasks, subjects.allTasks, settings.tasksMaxAge, -1, settings.duplicateWindowMs),
      ),
      withReplicas(limitsGiven(given.tasksMaxAge, undefined, window)),
    ],
    [
      replicated(
        streamConfig(
          STREAMS.events,
          subjects.allEvents,
          settings.eventsMaxAge,
          settings.eventsMaxBytes,
          settings.duplicateWindowMs,
        ),
      ),
      withReplicas(limitsGiven(given.eventsMaxAge, given.eventsMaxBytes, window)),
    ],
    // Dead letters wait for a person, so they are kept longer.
    [
      replicated(
        streamConfig(
          STREAMS.deadLetters,
          subjects.allDeadLetters,
          30 * DAY_MS,
          -1,
          settings.duplicateWindowMs,
        ),
      ),
      withReplicas(limitsGiven(undefined, undefined, window)),
    ],
  ];
  for (const [config, limits] of streams) await ensureStream(bus, jsm, config, limits, wait);
  const kvm = new Kvm(jetstreamOf(bus));
  for (const bucket of Object.values(BUCKETS)) await ensureBucket(bus, kvm, bucket, copies, wait);
  bus.logger.info(
    { streams: streams.map(([config]) => config.name), buckets: Object.values(BUCKETS) },
    'JetStream streams and KV buckets are ready',
  );
}

/**
 * Sets up Troupe's streams and buckets as {@link ensureTroupeStreams} does, or — when this client's NATS user may use
 * them but not create or change them (a worker on a locked-down server) — waits until a coordinator has created them,
 * saying so at `warn` when it starts waiting and every minute after.
 */
export async function ensureOrAwaitTroupeStreams(
  bus: JetStreamBus,
  opts: TroupeStreamsOptions & { signal?: AbortSignal } = {},
): Promise<void> {
  const { signal, ...setUp } = opts;
  try {
    await ensureTroupeStreams(bus, setUp);
    return;
  } catch (error) {
    if (!TransportError.is(error, 'permission_denied')) throw error;
  }
  const jsm = await jetstreamManagerOf(bus, opts.wait);
  const names = [...Object.values(STREAMS), ...Object.values(BUCKETS).map((bucket) => `KV_${bucket}`)];
  const missing = async () => {
    if (signal?.aborted) {
      throw new TransportError('aborted', "stopped while waiting for Troupe's streams and buckets", {
        cause: signal.reason,
      });
    }
    for (const name of names) {
      try {
        await untilReachable(bus, `stream ${name}`, () => jsm.streams.info(name), opts.wait);
      } catch (error) {
        if (isApiError(error, JetStreamApiCodes.StreamNotFound)) return name;
        throw error;
      }
    }
    return undefined;
  };
  const started = Date.now();
  let said = 0;
  for (let name = await missing(); name !== undefined; name = await missing()) {
    if (Date.now() - said >= AWAIT_STREAMS_LOG_MS) {
      said = Date.now();
      bus.logger.warn(
        { missing: name, waitedMs: said - started },
        `waiting for a coordinator to create Troupe's streams and buckets (${name} is missing, and this NATS user may not create it)`,
      );
    }
    await sleep(AWAIT_STREAMS_POLL_MS, undefined, { signal }).catch(() => undefined);
  }
  bus.logger.info({ waitedMs: Date.now() - started }, "Troupe's streams and buckets are there");
}

const AWAIT_STREAMS_POLL_MS = 500;
const AWAIT_STREAMS_LOG_MS = 60_000;

/** A JetStream client on the bus's connection, for publishing to streams and consuming them. */
export function jetstreamOf(bus: JetStreamBus): JetStreamClient {
  return jetstream(natsConnectionOf(bus));
}

/**
 * A JetStream manager on the bus's connection, once JetStream answers (see {@link untilReachable}); fails with
 * `jetstream_unavailable` when the server has no JetStream or cannot be reached in time.
 */
export async function jetstreamManagerOf(
  bus: JetStreamBus,
  wait?: UntilReachableOptions,
): Promise<JetStreamManager> {
  try {
    return await untilReachable(
      bus,
      'the JetStream API',
      () => jetstreamManager(natsConnectionOf(bus)),
      wait,
    );
  } catch (cause) {
    if (TransportError.is(cause)) throw cause;
    throw new TransportError(
      'jetstream_unavailable',
      `JetStream is not available on the NATS server at ${bus.server}: ${errorMessage(cause)}`,
      { cause },
    );
  }
}

/**
 * Opens one of Troupe's KV buckets; call {@link ensureTroupeStreams} first so it exists. With `direct`, reads use
 * the stream's direct get (no JetStream API call, no API advisory per read): only for a bucket whose stream allows
 * it, as every bucket made on nats-server 2.9 or later does, and has a single replica (replicas may answer behind).
 */
export function kvOf(bus: JetStreamBus, bucket: TroupeBucket, direct = false): Promise<KV> {
  return new Kvm(jetstreamOf(bus)).open(bucket, direct ? { allow_direct: true } : {});
}

function streamConfig(
  name: string,
  subject: string,
  maxAgeMs: number,
  maxBytes: number,
  duplicateWindowMs: number,
): TroupeStreamConfig {
  return {
    name,
    subjects: [subject],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(maxAgeMs),
    max_bytes: maxBytes,
    // The server refuses a duplicate window longer than the stream's max age.
    duplicate_window: nanos(Math.min(duplicateWindowMs, maxAgeMs)),
    num_replicas: 1,
  };
}

/** The limits a caller gave, in the stream's units; the duplicate window never past the max age. */
function limitsGiven(maxAgeMs?: number, maxBytes?: number, duplicateWindowMs?: number): Limits {
  return {
    ...(maxAgeMs === undefined ? {} : { max_age: nanos(maxAgeMs) }),
    ...(maxBytes === undefined ? {} : { max_bytes: maxBytes }),
    ...(duplicateWindowMs === undefined
      ? {}
      : { duplicate_window: nanos(Math.min(duplicateWindowMs, maxAgeMs ?? duplicateWindowMs)) }),
  };
}

async function ensureStream(
  bus: JetStreamBus,
  jsm: JetStreamManager,
  config: TroupeStreamConfig,
  limits: Limits,
  wait: UntilReachableOptions | undefined,
): Promise<void> {
  try {
    await untilReachable(
      bus,
      `stream ${config.name}`,
      () => throughRaces(() => createOrUpdate(jsm, config, limits)),
      wait,
    );
  } catch (error) {
    throw setupFailed(`stream ${config.name}`, error);
  }
}

async function createOrUpdate(
  jsm: JetStreamManager,
  config: TroupeStreamConfig,
  limits: Limits,
): Promise<void> {
  let current: StreamConfig;
  try {
    current = (await jsm.streams.info(config.name)).config;
  } catch (error) {
    if (!isApiError(error, JetStreamApiCodes.StreamNotFound)) throw error;
    await jsm.streams.add(config);
    return;
  }
  const wanted: Limits = { ...limits };
  // The server refuses a duplicate window longer than the max age: the window is kept within the max age the stream
  // will have, and goes back to the configured one when a longer max age allows it.
  const maxAge = wanted.max_age ?? current.max_age;
  const configured = wanted.duplicate_window ?? config.duplicate_window ?? current.duplicate_window;
  // A max age of 0 keeps messages for ever.
  const window = maxAge > 0 ? Math.min(configured, maxAge) : configured;
  if (window !== current.duplicate_window) wanted.duplicate_window = window;
  const changed = Object.entries(wanted).filter(([key, value]) => current[key as keyof Limits] !== value) as [
    keyof Limits,
    number,
  ][];
  const sameSubjects =
    current.subjects.length === config.subjects.length &&
    config.subjects.every((subject) => current.subjects.includes(subject));
  if (changed.length === 0 && sameSubjects) return;
  await jsm.streams.update(config.name, { subjects: config.subjects, ...Object.fromEntries(changed) });
}

async function ensureBucket(
  bus: JetStreamBus,
  kvm: Kvm,
  bucket: string,
  replicas: number,
  wait: UntilReachableOptions | undefined,
): Promise<void> {
  const create = () => kvm.create(bucket, { history: 1, storage: StorageType.File, replicas });
  try {
    await untilReachable(bus, `KV bucket ${bucket}`, () => throughRaces(create), wait);
  } catch (error) {
    throw setupFailed(`KV bucket ${bucket}`, error);
  }
}

/** Tries `op` again at once when another process created the same stream between our look and our write. */
function throughRaces<T>(op: () => Promise<T>): Promise<T> {
  return pRetry(() => op(), {
    retries: RACE_RETRIES,
    minTimeout: 0,
    shouldRetry: ({ error }) =>
      isApiError(error, STREAM_NAME_IN_USE) || isApiError(error, JetStreamApiCodes.StreamNotFound),
  });
}

/** A wait that ran out is reported as it is; anything else names what could not be set up. */
function setupFailed(what: string, error: unknown): TransportError {
  if (TransportError.is(error)) return error;
  return new TransportError('stream_setup_failed', `cannot set up ${what}: ${errorMessage(error)}`, {
    cause: error,
  });
}

/** Whether a failure is JetStream saying that the stream asked for does not exist. */
export function isStreamMissing(error: unknown): boolean {
  return isApiError(error, JetStreamApiCodes.StreamNotFound);
}

/** Whether a failure is the JetStream API's answer with this code (`JetStreamApiCodes`). */
export function isApiError(error: unknown, code: number): boolean {
  return error instanceof JetStreamApiError && error.code === code;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
