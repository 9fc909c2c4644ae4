/**
 * Loads each key once and keeps what it found, a load under way shared by everyone who asks meanwhile. A load that
 * found nothing worth keeping (`keeps` says so: a version not stored yet, say) or failed is forgotten, so the next
 * ask tries again.
 */
export class LoadCache<V> {
  readonly #load: (key: string) => Promise<V>;
  readonly #keeps: (value: V) => boolean;
  readonly #loads = new Map<string, Promise<V>>();

  constructor(load: (key: string) => Promise<V>, keeps: (value: V) => boolean) {
    this.#load = load;
    this.#keeps = keeps;
  }

  get(key: string): Promise<V> {
    const kept = this.#loads.get(key);
    if (kept !== undefined) return kept;
    const loading = this.#load(key);
    this.#loads.set(key, loading);
    const forget = () => this.#loads.get(key) === loading && this.#loads.delete(key);
    loading.then((value) => this.#keeps(value) || forget(), forget);
    return loading;
  }

  /** Keeps a value known without loading it (one this process just wrote). */
  set(key: string, value: V): void {
    this.#loads.set(key, Promise.resolve(value));
  }

  delete(key: string): void {
    this.#loads.delete(key);
  }
}
