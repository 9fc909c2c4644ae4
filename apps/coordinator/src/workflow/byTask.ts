/**
 * What a runner keeps of its tasks' work under way, by task (its sends in flight, its `human` steps' runs): a task's
 * one item on its own, as most tasks have, and several (a parallel step's) as an array.
 */
export class ByTask<T extends { readonly taskId: string }> {
  readonly #items = new Map<string, T | T[]>();

  /** Keeps `item` under its task, in place of the task's items that `replaces` picks. */
  add(item: T, replaces: (kept: T) => boolean = () => false): void {
    const others = this.of(item.taskId).filter((kept) => !replaces(kept));
    this.#items.set(item.taskId, others.length === 0 ? item : [...others, item]);
  }

  /** The task's items (a copy: an item may be forgotten while they are gone through). */
  of(taskId: string): T[] {
    const kept = this.#items.get(taskId);
    return kept === undefined ? [] : Array.isArray(kept) ? [...kept] : [kept];
  }

  forget(item: T): void {
    const kept = this.of(item.taskId);
    if (!kept.includes(item)) return;
    const left = kept.filter((other) => other !== item);
    if (left.length === 0) this.#items.delete(item.taskId);
    else this.#items.set(item.taskId, left.length === 1 ? (left[0] as T) : left);
  }

  /** Items kept now, of every task. */
  get size(): number {
    let size = 0;
    for (const kept of this.#items.values()) size += Array.isArray(kept) ? kept.length : 1;
    return size;
  }
}
