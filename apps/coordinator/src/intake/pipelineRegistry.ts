import { BUCKETS, Name } from '@troupe/protocol';
import { KvStore, type NatsBus, type UntilReachableOptions } from '@troupe/runtime';
import { z } from 'zod';
import { FlowGraph, flowGraph } from '../config/flowGraph.ts';
import { type PipelineConfig, sessionSummarizer } from '../config/pipelineSchema.ts';

/** What the KV bucket `pipelines` says of a pipeline some coordinator has loaded. */
export const PipelineRegistration = z.object({
  name: Name,
  description: z.string().optional(),
  agents: z.array(Name),
  steps: z.array(z.string()),
  /** The flow as a graph of steps; absent in registrations from before it was added. */
  graph: FlowGraph.optional(),
  /** The agent that summarizes the pipeline's gateway sessions; absent in registrations from before it was added. */
  summarizer: Name.optional(),
  host: z.string(),
  registeredAt: z.string(),
  /**
   * The hash of the newest version: what new tasks run on. A coordinator that starts names its own unless the one
   * named was introduced later (see `register`); `troupe versions use` names any stored one.
   */
  version: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
export type PipelineRegistration = z.infer<typeof PipelineRegistration>;

/** The pipelines known across every coordinator on this NATS, so any process can tell an unknown one. */
export class PipelineRegistry {
  readonly #store: KvStore<typeof PipelineRegistration>;
  #cache: { names: Promise<string[]>; at: number } | undefined;

  private constructor(store: KvStore<typeof PipelineRegistration>) {
    this.#store = store;
  }

  static async open(bus: NatsBus, wait?: UntilReachableOptions): Promise<PipelineRegistry> {
    return new PipelineRegistry(await KvStore.open(bus, BUCKETS.pipelines, PipelineRegistration, wait));
  }

  /**
   * Registers the pipeline as loaded at version `version`, which becomes the newest — unless `keeps` says the
   * registered version stays the newest (one introduced later than `version`): then the registration is left as it
   * is, since it describes that version. Written over the registration as read, so of two coordinators starting at
   * once the one that reads the other's write decides again. Returns whether `version` is the newest now.
   */
  async register(
    config: PipelineConfig,
    host: string,
    now: Date,
    version?: string,
    keeps?: (registered: string) => Promise<boolean>,
  ): Promise<boolean> {
    const registration: PipelineRegistration = {
      name: config.name,
      ...(config.description === undefined ? {} : { description: config.description }),
      agents: Object.keys(config.agents),
      steps: config.flow.map((s) => s.id),
      graph: flowGraph(config),
      ...(sessionSummarizer(config) === undefined ? {} : { summarizer: sessionSummarizer(config) }),
      host,
      registeredAt: now.toISOString(),
      ...(version === undefined ? {} : { version }),
    };
    for (;;) {
      const entry = await this.#store.get(config.name);
      const registered = entry?.value.version;
      if (registered !== undefined && registered !== version && keeps && (await keeps(registered)))
        return false;
      const written = entry
        ? await this.#store.update(config.name, registration, entry.revision)
        : await this.#store.create(config.name, registration);
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
