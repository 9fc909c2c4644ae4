import { createHash } from 'node:crypto';
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  jetstreamManager,
  type MsgRequest,
} from '@nats-io/jetstream';
import { Base64UrlPaddedCodec, type ObjectStore, Objm, StorageType } from '@nats-io/obj';
import type { NatsConnection } from '@nats-io/transport-node';
import type { JetStreamBus } from '../transport/bus.ts';
import { TransportError } from '../transport/transportError.ts';
import { ValueStoreError } from './valueStoreError.ts';

/** What an {@link ObjectBucket} works over: the bus an app holds, or a bare nats.js connection (a test's). */
export type ObjectBucketConnection = JetStreamBus | { readonly connection: NatsConnection };

/** An object as a listing shows it: its name, size and the metadata it was stored with. No body is read. */
export interface ObjectListing {
  name: string;
  size: number;
  metadata: Record<string, string>;
}

/** What an object's description (the one message the object store keeps per object) holds that is read here. */
interface StoredInfo {
  name: string;
  nuid: string;
  size: number;
  chunks: number;
  digest: string;
  deleted?: boolean;
  metadata?: Record<string, string>;
}

/**
 * One NATS object store of named objects, each with metadata, for what a client keeps that is not a task's (eval
 * datasets and experiments): made on the first write, kept without an age limit. Reads use plain message gets
 * ({@link list} the stream's subjects, then each object's description), never a consumer, so a user who may only
 * read needs no right to make consumers; a bucket not made yet reads as empty.
 *
 * @example
 * const bucket = new ObjectBucket(bus, 'troupe-evals', 'Troupe: eval datasets and experiments');
 * await bucket.put('datasets/support/1', bytes, { summary: '{…}' });
 * const listed = await bucket.list('datasets/');
 */
export class ObjectBucket {
  readonly #connection: NatsConnection;
  readonly #bucket: string;
  readonly #description: string;
  readonly #stream: string;
  #jsm: Promise<JetStreamManager> | undefined;
  #store: Promise<ObjectStore> | undefined;

  constructor(bus: ObjectBucketConnection, bucket: string, description: string) {
    // A NatsBus carries its nats.js connection; a bus over anything else has no object store.
    if (!('connection' in bus)) {
      throw new TransportError(
        'not_nats',
        `the bus ${bus.name} is not a NATS connection; the object store ${bucket} needs one`,
      );
    }
    this.#connection = bus.connection as NatsConnection;
    this.#bucket = bucket;
    this.#description = description;
    this.#stream = `OBJ_${bucket}`;
  }

  /**
   * Stores `bytes` under `name` with `metadata`, replacing what was stored under it; makes the bucket if need be.
   * With `onlyNew`, the server stores it only if nothing was ever stored under `name` (its description is written
   * expecting no earlier one), and the put answers false, storing nothing, when something was.
   */
  async put(
    name: string,
    bytes: Uint8Array,
    metadata: Record<string, string>,
    options: { onlyNew?: boolean } = {},
  ): Promise<boolean> {
    const store = await this.#open();
    try {
      await store.putBlob({ name, metadata }, bytes, options.onlyNew ? { previousRevision: 0 } : undefined);
      return true;
    } catch (error) {
      if (
        options.onlyNew &&
        error instanceof JetStreamApiError &&
        error.code === JetStreamApiCodes.StreamWrongLastSequence
      )
        return false;
      throw error;
    }
  }

  /**
   * The object's bytes, checked against the size and digest it was stored with; undefined when it (or the bucket)
   * is not there. Fails with `value_corrupt` when the object was replaced while it was read: read it again.
   */
  async read(name: string): Promise<Uint8Array | undefined> {
    let stored: StoredObject | undefined;
    try {
      stored = await readStoredObject(await this.#manager(), this.#bucket, name);
    } catch (error) {
      if (streamMissing(error)) return undefined;
      throw error;
    }
    if (!stored) return undefined;
    const { info, bytes: whole } = stored;
    const digest = `SHA-256=${Base64UrlPaddedCodec.encode(createHash('sha256').update(whole).digest())}`;
    if (whole.length !== info.size || digest !== info.digest) {
      throw new ValueStoreError(
        'value_corrupt',
        `object ${name} of ${this.#bucket} read back as ${whole.length} bytes, not the ${info.size} it was stored with: it was replaced while it was read; read it again`,
      );
    }
    return whole;
  }

  /** The objects whose names start with `prefix` (every one by default), deleted ones left out; empty with no bucket. */
  async list(prefix = ''): Promise<ObjectListing[]> {
    const jsm = await this.#manager();
    let subjects: string[];
    try {
      const info = await jsm.streams.info(this.#stream, { subjects_filter: `$O.${this.#bucket}.M.>` });
      subjects = Object.keys(info.state.subjects ?? {});
    } catch (error) {
      if (streamMissing(error)) return [];
      throw error;
    }
    const infos = await Promise.all(
      subjects.map(async (subject) => {
        const message = await jsm.streams.getMessage(this.#stream, { last_by_subj: subject });
        return message?.json<StoredInfo>();
      }),
    );
    return infos
      .filter(
        (info): info is StoredInfo => info !== undefined && !info.deleted && info.name.startsWith(prefix),
      )
      .map((info) => ({ name: info.name, size: info.size, metadata: info.metadata ?? {} }));
  }

  /**
   * Makes the bucket when it does not exist, kept on `replicas` servers (1 by default): a coordinator does at start,
   * so that a user who may write objects but not make streams finds it there.
   */
  async ensure(options: { replicas?: number } = {}): Promise<void> {
    await this.#open(options.replicas);
  }

  /** The bucket, made now when it does not exist (file storage, no age limit: what it keeps is kept). */
  #open(replicas?: number): Promise<ObjectStore> {
    // `create` opens the bucket when it exists, and makes it when not.
    this.#store ??= new Objm(this.#connection).create(this.#bucket, {
      storage: StorageType.File,
      description: this.#description,
      ...(replicas === undefined ? {} : { replicas }),
    });
    this.#store.catch(() => {
      this.#store = undefined;
    });
    return this.#store;
  }

  #manager(): Promise<JetStreamManager> {
    this.#jsm ??= jetstreamManager(this.#connection, { checkAPI: false });
    return this.#jsm;
  }
}

/** The subject of an object's description in the object store `bucket` (its name, base64url-encoded). */
export const objectMetaSubject = (bucket: string, name: string): string =>
  `$O.${bucket}.M.${Base64UrlPaddedCodec.encode(name)}`;

/** An object as {@link readStoredObject} read it: its description, its bytes, and whether every chunk was there. */
export interface StoredObject {
  info: StoredInfo;
  bytes: Buffer;
  whole: boolean;
}

/**
 * An object of `bucket` read with plain message gets — its description by subject, then its chunks in order — never a
 * consumer, so a user who may only read needs no right to make one; each get goes to the stream's leader, so no
 * replica that has not caught up answers. Undefined when the object is not stored or was deleted; `whole` is false
 * when a chunk is gone (the object was replaced while it was read, or aged out). The caller checks the bytes.
 */
export async function readStoredObject(
  jsm: JetStreamManager,
  bucket: string,
  name: string,
): Promise<StoredObject | undefined> {
  const stream = `OBJ_${bucket}`;
  const meta = await jsm.streams.getMessage(stream, { last_by_subj: objectMetaSubject(bucket, name) });
  const info = meta?.json<StoredInfo>();
  if (!info || info.deleted) return undefined;
  const chunks = `$O.${bucket}.C.${info.nuid}`;
  const parts: Uint8Array[] = [];
  let seq = 0;
  for (let chunk = 0; chunk < info.chunks; chunk += 1) {
    const next = { seq: seq + 1, next_by_subj: chunks } as unknown as MsgRequest;
    const message = await jsm.streams.getMessage(stream, next);
    if (!message) return { info, bytes: Buffer.concat(parts), whole: false };
    parts.push(message.data);
    seq = message.seq;
  }
  return { info, bytes: Buffer.concat(parts), whole: true };
}

function streamMissing(error: unknown): boolean {
  return error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound;
}
