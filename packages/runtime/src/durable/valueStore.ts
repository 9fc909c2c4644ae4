import { createHash } from 'node:crypto';
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  jetstreamManager,
} from '@nats-io/jetstream';
import { Base64UrlPaddedCodec, type ObjectStore, Objm, StorageType } from '@nats-io/obj';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import {
  errorMessage,
  fillInput,
  type InputCut,
  inputBucket,
  type ValueRef,
  valueBucket,
} from '@troupe/protocol';
import { utf8Head } from '../tools/truncateOutput.ts';
import type { JetStreamBus } from '../transport/bus.ts';
import { natsConnectionOf } from '../transport/natsBus.ts';
import { objectMetaSubject, readStoredObject } from './objectBucket.ts';
import { ValueStoreError } from './valueStoreError.ts';

/** Values above this many UTF-8 bytes leave the message for the object store: a reply, an event or a checkpoint holding a few of them still fits NATS's 1 MiB. */
export const OFFLOAD_BYTES = 256 * 1024;
/** How much of an offloaded value its message keeps, to read without a fetch (and for conditions on it). */
export const PREVIEW_BYTES = 8 * 1024;
const DAY_MS = 24 * 60 * 60 * 1000;

export interface ValueStoreOptions {
  /** Values above this many UTF-8 bytes are stored; {@link OFFLOAD_BYTES} by default. */
  offloadBytes?: number;
  /** How much of a stored value stays in the message; {@link PREVIEW_BYTES} by default. */
  previewBytes?: number;
  /** How long a bucket {@link ValueStore.ensureBucket} makes keeps its values: the `TASKS` stream's, 7 days by default. */
  maxAgeMs?: number;
  /** Replicas of a bucket {@link ValueStore.ensureBucket} makes; 1 by default. */
  replicas?: number;
}

/** A value as a message carries it: whole, or a preview with the reference to the whole. */
export interface Offloaded {
  text: string;
  ref?: ValueRef;
}

/**
 * What a {@link ValueStore} works over: the bus an app holds, or a bare nats.js connection (a test of what one NATS
 * user may do with its own credentials).
 */
export type ValueStoreConnection = JetStreamBus | { readonly connection: NatsConnection };

/**
 * Large values (step outputs, tool results, task outputs) in NATS object stores, one bucket per pipeline
 * (`troupe-values-<pipeline>`), so that no message has to cut one to fit: the message keeps a preview and a
 * {@link ValueRef}; {@link read} gives the whole back, checked against its size and SHA-256. Objects are named from
 * the ids of what made them and the value's digest, so a step run again that makes the same value writes the same
 * object (and a write of what is there is skipped), and one that makes another value never replaces the first.
 * A bucket's values age out with its `max_age`, set to the task retention. Reads use plain message gets, never a
 * consumer, so a role that may only read needs no right to create consumers (see docs/permissions.md).
 *
 * @example
 * const values = new ValueStore(bus);
 * const { text, ref } = await values.offload('demo', 'task-1.write.1.output', hugeText);
 * const whole = ref ? await values.read(ref) : text;
 */
export class ValueStore {
  readonly #bus: ValueStoreConnection;
  readonly #offloadBytes: number;
  readonly #previewBytes: number;
  readonly #maxAgeMs: number;
  readonly #replicas: number;
  readonly #buckets = new Map<string, Promise<ObjectStore>>();
  #jsm: Promise<JetStreamManager> | undefined;

  constructor(bus: ValueStoreConnection, opts: ValueStoreOptions = {}) {
    this.#bus = bus;
    this.#offloadBytes = opts.offloadBytes ?? OFFLOAD_BYTES;
    this.#previewBytes = opts.previewBytes ?? PREVIEW_BYTES;
    this.#maxAgeMs = opts.maxAgeMs ?? 7 * DAY_MS;
    this.#replicas = opts.replicas ?? 1;
  }

  /** The size above which {@link offload} stores a value. */
  get offloadBytes(): number {
    return this.#offloadBytes;
  }

  /**
   * Makes the pipeline's buckets when they do not exist, its values' and its task inputs' (a coordinator does this at
   * start, with the retention).
   */
  async ensureBucket(pipeline: string): Promise<void> {
    await Promise.all([this.#create(valueBucket(pipeline)), this.#create(inputBucket(pipeline))]);
  }

  /**
   * The value as a message may carry it: itself when it is small, else its preview and a reference to the whole,
   * which is stored under `name` in the pipeline's bucket first.
   */
  async offload(pipeline: string, name: string, text: string): Promise<Offloaded> {
    const bytes = Buffer.from(text, 'utf8');
    if (bytes.length <= this.#offloadBytes) return { text };
    const ref = await this.#store(pipeline, name, bytes);
    return { text: previewOf(bytes, ref, this.#previewBytes), ref };
  }

  /** Stores a value whatever its size (a tool result its message cuts shorter than {@link offload} would). */
  store(pipeline: string, name: string, text: string): Promise<ValueRef> {
    return this.#store(pipeline, name, Buffer.from(text, 'utf8'));
  }

  /**
   * Stores bytes as they are (a workspace file, which need not be text) under `name` exactly: the caller's name
   * already says what the content is (see `workspaceObject`), so nothing is added to it.
   */
  storeBytes(pipeline: string, name: string, bytes: Uint8Array): Promise<ValueRef> {
    return this.#store(pipeline, name, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), false);
  }

  /**
   * Stores a task's input too large for its message (its JSON) in the pipeline's inputs bucket, named
   * `<taskId>.input.<digest>`: the `inputRef` the task then carries in place of `input`.
   */
  storeInput(pipeline: string, taskId: string, json: string): Promise<ValueRef> {
    const bytes = Buffer.from(json, 'utf8');
    return this.#store(pipeline, `${taskId}.input`, bytes, true, inputBucket(pipeline));
  }

  async #store(
    pipeline: string,
    name: string,
    bytes: Buffer,
    digestInName = true,
    bucket = valueBucket(pipeline),
  ): Promise<ValueRef> {
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const ref: ValueRef = {
      bucket,
      // The digest is in the name: two runs of one step that made different values (a step may run in two places
      // at once) store two objects, so neither replaces the value the other's reference names.
      name: digestInName ? `${name}.${sha256.slice(0, 16)}` : name,
      bytes: bytes.length,
      sha256,
    };
    await this.#put(ref, bytes);
    return ref;
  }

  /** The whole value a reference names; fails with `value_missing`, `value_corrupt` or `value_unavailable`. */
  async read(ref: ValueRef): Promise<string> {
    return (await this.readBytes(ref)).toString('utf8');
  }

  /** {@link read}, as the bytes stored. */
  async readBytes(ref: ValueRef): Promise<Buffer> {
    const where = `${ref.bucket}/${ref.name}`;
    try {
      const stored = await readStoredObject(await this.#manager(), ref.bucket, ref.name);
      if (!stored?.whole) throw missing(where);
      const whole = stored.bytes;
      const sha256 = createHash('sha256').update(whole).digest('hex');
      if (whole.length !== ref.bytes || sha256 !== ref.sha256) {
        throw new ValueStoreError(
          'value_corrupt',
          `value ${where} read back as ${whole.length} bytes with SHA-256 ${sha256}, not the ${ref.bytes} bytes with SHA-256 ${ref.sha256} its reference names`,
        );
      }
      return whole;
    } catch (error) {
      throw asValueError(error, `cannot read value ${where}`);
    }
  }

  /**
   * A task's input with each key cut to a preview given its whole value again, read from the stored input the cut
   * names.
   */
  async wholeInput(
    input: Record<string, unknown> | undefined,
    cut: InputCut,
  ): Promise<Record<string, unknown>> {
    return fillInput(input, cut, await this.read(cut.ref));
  }

  /** The whole of a value a message carries: the text itself, or what its reference names. */
  whole(value: Offloaded): Promise<string> {
    return value.ref ? this.read(value.ref) : Promise.resolve(value.text);
  }

  async #put(ref: ValueRef, bytes: Buffer): Promise<void> {
    const where = `${ref.bucket}/${ref.name}`;
    try {
      const jsm = await this.#manager();
      const stored = await this.#stored(jsm, ref);
      // A step run again writes what its first run did: what is there already is kept, not written twice.
      if (stored) return;
      const store = await this.#open(ref.bucket);
      await store.putBlob({ name: ref.name }, bytes);
    } catch (error) {
      throw asValueError(error, `cannot store value ${where} (${ref.bytes} bytes)`);
    }
  }

  /** Whether the object is stored with the reference's size and digest; false when its bucket does not exist yet. */
  async #stored(jsm: JetStreamManager, ref: ValueRef): Promise<boolean> {
    try {
      const meta = await jsm.streams.getMessage(`OBJ_${ref.bucket}`, { last_by_subj: metaSubject(ref) });
      const info = meta?.json<{ size: number; digest: string; deleted?: boolean }>();
      const digest = `SHA-256=${Base64UrlPaddedCodec.encode(Buffer.from(ref.sha256, 'hex'))}`;
      return info !== undefined && !info.deleted && info.size === ref.bytes && info.digest === digest;
    } catch (error) {
      // Made by a coordinator, with the deployment's retention and replicas: a writer never makes one of its own.
      if (streamMissing(error)) {
        throw new ValueStoreError(
          'value_unavailable',
          `the object store ${ref.bucket} does not exist: a coordinator running its pipeline makes it when it starts`,
          { cause: error },
        );
      }
      throw error;
    }
  }

  #open(bucket: string): Promise<ObjectStore> {
    let store = this.#buckets.get(bucket);
    if (!store) {
      store = new Objm(this.#connection()).open(bucket, false);
      store.catch(() => this.#buckets.delete(bucket));
      this.#buckets.set(bucket, store);
    }
    return store;
  }

  #create(bucket: string): Promise<ObjectStore> {
    const store = new Objm(this.#connection()).create(bucket, {
      ttl: nanos(this.#maxAgeMs),
      replicas: this.#replicas,
      storage: StorageType.File,
      description: bucket.startsWith('troupe-inputs-')
        ? 'Troupe: task inputs of one pipeline too large for their task message'
        : 'Troupe: large step outputs, tool results and task outputs of one pipeline',
    });
    store.catch(() => this.#buckets.delete(bucket));
    this.#buckets.set(bucket, store);
    return store;
  }

  #connection(): NatsConnection {
    return 'connection' in this.#bus ? this.#bus.connection : natsConnectionOf(this.#bus);
  }

  #manager(): Promise<JetStreamManager> {
    this.#jsm ??= jetstreamManager(this.#connection(), { checkAPI: false });
    return this.#jsm;
  }
}

/** The start of a value and a line saying how large the whole is and where it is kept. */
export function previewOf(bytes: Uint8Array, ref: ValueRef, previewBytes = PREVIEW_BYTES): string {
  const head = utf8Head(bytes, previewBytes);
  const shown = Buffer.byteLength(head, 'utf8');
  return `${head}\n…[cut: showing ${shown} of ${ref.bytes} bytes; the whole is object "${ref.name}" in NATS object store ${ref.bucket}, sha256 ${ref.sha256}]`;
}

function metaSubject(ref: ValueRef): string {
  return objectMetaSubject(ref.bucket, ref.name);
}

function missing(where: string): ValueStoreError {
  return new ValueStoreError(
    'value_missing',
    `value ${where} is not stored: its bucket's retention removed it, or it was never written`,
  );
}

function streamMissing(error: unknown): boolean {
  return error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound;
}

function asValueError(error: unknown, what: string): ValueStoreError {
  if (ValueStoreError.is(error)) return error;
  if (streamMissing(error)) {
    return new ValueStoreError('value_missing', `${what}: its bucket does not exist`, { cause: error });
  }
  return new ValueStoreError('value_unavailable', `${what}: ${errorMessage(error)}`, { cause: error });
}
