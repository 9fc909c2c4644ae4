import { BUCKETS, PipelineRegistration } from '@troupe/protocol';
import { type JetStreamBus, KvStore, type UntilReachableOptions } from '@troupe/runtime/bus';

/** The pipelines known across every coordinator on this NATS, so any process can tell an unknown one. */
export class PipelineRegistry {
  readonly #store: KvStore<typeof PipelineRegistration>;
  #cache: { names: Promise<string[]>; at: number } | undefined;

  private constructor(store: KvStore<typeof PipelineRegistration>) {
    this.#store = store;
  }

  static async open(bus: JetStreamBus, wait?: UntilReachableOptions): Promise<PipelineRegistry> {
    return new PipelineRegistry(await KvStore.open(bus, BUCKETS.pipelines, PipelineRegistration, wait));
  }

  /**
   * Registers the pipeline as loaded at its `version`, which becomes the newest — unless `keeps` says the
   * registered version stays the newest (one introduced later than `version`): then the registration is left as it
   * is, since it describes that version. Written over the registration as read, so of two coordinators starting at
   * once the one that reads the other's write decides again. Returns whether this version is the newest now.
   */
  async register(
    registration: PipelineRegistration,
    keeps?: (registered: string) => Promise<boolean>,
  ): Promise<boolean> {
    const { name, version } = registration;
    for (;;) {
      const entry = await this.#store.get(name);
      const registered = entry?.value.version;
      if (registered !== undefined && registered !== version && keeps && (await keeps(registered)))
        return false;
      const written = entry
        ? await this.#store.update(name, registration, entry.revision)
        : await this.#store.create(name, registration);
      if (written !== undefined) break;
    }
    this.#cache = undefined;
    return true;
  }

  /**
   * Names of every registered pipeline; cached for a second, since every task subject asks. Callers that ask
   * while a lookup is under way share it: a flood of tasks makes one lookup, not one each.
   */
  names(): Promise<string[]> {
    if (this.#cache && Date.now() - this.#cache.at < 1_000) return this.#cache.names;
    const lookup = this.#store.keys().then((keys) => keys.sort());
    this.#cache = { names: lookup, at: Date.now() };
    // A failed lookup is not cached: the next caller tries again.
    lookup.catch(() => {
      if (this.#cache?.names === lookup) this.#cache = undefined;
    });
    return lookup;
  }

  /** Every registered pipeline, by name. */
  async all(): Promise<PipelineRegistration[]> {
    const found = await Promise.all((await this.#store.keys()).map((name) => this.get(name)));
    return found
      .filter((p): p is PipelineRegistration => p !== undefined)
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): Promise<PipelineRegistration | undefined> {
    return this.#store.get(name).then((entry) => entry?.value);
  }
}
