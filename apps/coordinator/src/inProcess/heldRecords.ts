import type { WorkflowRecord } from '@troupe/protocol';
import type { KvEntry } from '@troupe/runtime';
import type { WorkflowStore } from '../task/taskServices.ts';

/**
 * The task records of a run that stores nothing (`troupe run`): each one is kept as the very object the task made,
 * never serialised nor validated again, with the revisions a bucket would give it, so the lease fencing of a
 * checkpoint works as on KV. A record lives until {@link HeldRecords.forget}: nothing of it outlives the process.
 */
export class HeldRecords implements WorkflowStore {
  readonly #records = new Map<string, { value: WorkflowRecord; revision: number }>();
  #revision = 0;

  /** Records held now. */
  get size(): number {
    return this.#records.size;
  }

  async get(key: string): Promise<KvEntry<WorkflowRecord> | undefined> {
    const held = this.#records.get(key);
    return held && { key, value: held.value, revision: held.revision };
  }

  async create(key: string, value: WorkflowRecord): Promise<number | undefined> {
    return this.#records.has(key) ? undefined : this.#hold(key, value);
  }

  async update(key: string, value: WorkflowRecord, revision: number): Promise<number | undefined> {
    return this.#records.get(key)?.revision === revision ? this.#hold(key, value) : undefined;
  }

  /** Drops a task's record once its run is over, so a loop of runs holds none of them. */
  forget(key: string): void {
    this.#records.delete(key);
  }

  #hold(key: string, value: WorkflowRecord): number {
    const revision = ++this.#revision;
    this.#records.set(key, { value, revision });
    return revision;
  }
}
