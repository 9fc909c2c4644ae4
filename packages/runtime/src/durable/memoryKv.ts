import type { z } from 'zod';
import { subjectMatches } from '../transport/subjectMatches.ts';
import type { KeyValue, KvEntry } from './kvStore.ts';

/**
 * A {@link KeyValue} bucket in memory, for unit tests: revisions that grow with every write across the bucket (as a
 * NATS KV's stream sequence does), compare-and-set `create` and `update`, NATS wildcards in `keys`, and watches.
 * Values are stored as JSON text, so a reader gets a copy, and when a schema is given each write is checked against
 * it, as `KvStore` does.
 */
export class MemoryKv<T> implements KeyValue<T> {
  readonly #entries = new Map<string, { data: string; revision: number }>();
  readonly #watchers = new Map<string, Set<(entry: KvEntry<T>) => void>>();
  readonly #schema: z.ZodType<T> | undefined;
  #revision = 0;
  /** Writes so far (put, create, update, delete), for assertions about round trips. */
  writes = 0;
  /** Gets so far, for assertions about round trips. */
  gets = 0;

  constructor(schema?: z.ZodType<T>) {
    this.#schema = schema;
  }

  async get(key: string): Promise<KvEntry<T> | undefined> {
    this.gets++;
    const entry = this.#entries.get(key);
    return entry && { key, value: JSON.parse(entry.data) as T, revision: entry.revision };
  }

  async put(key: string, value: T): Promise<number> {
    return this.#write(key, value);
  }

  async create(key: string, value: T): Promise<number | undefined> {
    return this.#entries.has(key) ? undefined : this.#write(key, value);
  }

  async update(key: string, value: T, revision: number): Promise<number | undefined> {
    return this.#entries.get(key)?.revision === revision ? this.#write(key, value) : undefined;
  }

  async delete(key: string): Promise<void> {
    this.writes++;
    this.#revision++;
    this.#entries.delete(key);
  }

  async keys(filter?: string): Promise<string[]> {
    const keys = [...this.#entries.keys()];
    if (filter === undefined) return keys;
    const pattern = filter.split('.');
    return keys.filter((key) => subjectMatches(pattern, key.split('.')));
  }

  async watch(key: string, onValue: (entry: KvEntry<T>) => void): Promise<() => void> {
    const watchers = this.#watchers.get(key) ?? new Set();
    this.#watchers.set(key, watchers);
    watchers.add(onValue);
    // The value now, read at once: a write after this call is told after it, in order.
    const entry = this.#entries.get(key);
    if (entry) {
      const current = { key, value: JSON.parse(entry.data) as T, revision: entry.revision };
      queueMicrotask(() => watchers.has(onValue) && onValue(current));
    }
    return () => watchers.delete(onValue);
  }

  #write(key: string, value: T): number {
    const checked = this.#schema ? this.#schema.parse(value) : value;
    const data = JSON.stringify(checked);
    const revision = ++this.#revision;
    this.writes++;
    this.#entries.set(key, { data, revision });
    for (const watcher of this.#watchers.get(key) ?? []) {
      const entry = { key, value: JSON.parse(data) as T, revision };
      queueMicrotask(() => watcher(entry));
    }
    return revision;
  }
}
