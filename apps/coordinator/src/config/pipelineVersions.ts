import { BUCKETS, PipelineVersion } from '@troupe/protocol';
import { type JetStreamBus, type KeyValue, KvStore, type UntilReachableOptions } from '@troupe/runtime';
import { LoadCache } from './loadCache.ts';

/**
 * The versions of every pipeline some task started on, in the KV bucket `versions` (key `<pipeline>.<hash>`): a
 * coordinator whose file has changed since runs such a task on the version it started on, read from here.
 */
export class PipelineVersions {
  readonly #store: KeyValue<PipelineVersion>;
  /** A version never changes once stored: each is read once per process (a miss is read again next time). */
  readonly #read: LoadCache<PipelineVersion | undefined>;

  constructor(store: KeyValue<PipelineVersion>) {
    this.#store = store;
    this.#read = new LoadCache(
      (key) => store.get(key).then((entry) => entry?.value),
      (version) => version !== undefined,
    );
  }

  static async open(bus: JetStreamBus, wait?: UntilReachableOptions): Promise<PipelineVersions> {
    return new PipelineVersions(await KvStore.open(bus, BUCKETS.versions, PipelineVersion, wait));
  }

  /**
   * Stores a version, or stores it again with its new `storedAt` (a version is its content, so nothing else
   * changes): each coordinator that starts with it does, so a version in use is never one the retention removes.
   * When it was first stored (`introducedAt`) is kept from the stored one. Returns the version as stored.
   */
  async save(version: PipelineVersion): Promise<PipelineVersion> {
    const key = keyOf(version.pipeline, version.hash);
    const stored = (await this.#store.get(key))?.value;
    const saved: PipelineVersion = {
      ...version,
      introducedAt: stored ? introducedAt(stored) : (version.introducedAt ?? version.storedAt),
    };
    await this.#put(saved);
    return saved;
  }

  /** Marks a stored version as introduced `at` (`troupe versions use`): coordinators of older ones then leave it newest. */
  async introduce(version: PipelineVersion, at: Date): Promise<void> {
    await this.#put({ ...version, introducedAt: at.toISOString() });
  }

  async #put(version: PipelineVersion): Promise<void> {
    const key = keyOf(version.pipeline, version.hash);
    try {
      await this.#store.put(key, version);
    } catch (error) {
      // Most often a pipeline whose scripts outgrow one NATS message (max_payload, 1 MB by default).
      const bytes = Buffer.byteLength(JSON.stringify(version));
      throw new Error(
        `cannot store version ${version.hash.slice(0, 12)} of pipeline ${version.pipeline} (${bytes} bytes with the files it names) in the KV bucket versions: ${(error as Error).message}`,
        { cause: error },
      );
    }
    this.#read.set(key, version);
  }

  /** The version of `pipeline` with this hash, or undefined when none is stored. */
  get(pipeline: string, hash: string): Promise<PipelineVersion | undefined> {
    return this.#read.get(keyOf(pipeline, hash));
  }

  /** The hashes of every stored version of `pipeline`. */
  async hashes(pipeline: string): Promise<string[]> {
    return (await this.#store.keys(`${pipeline}.*`)).map((key) => key.slice(pipeline.length + 1));
  }

  /** Removes a stored version (see `pruneVersions` for when that is safe). */
  async remove(pipeline: string, hash: string): Promise<void> {
    this.#read.delete(keyOf(pipeline, hash));
    await this.#store.delete(keyOf(pipeline, hash));
  }
}

const keyOf = (pipeline: string, hash: string): string => `${pipeline}.${hash}`;

/** When a version was first stored, or chosen as the newest since. */
export const introducedAt = (version: PipelineVersion): string => version.introducedAt ?? version.storedAt;
