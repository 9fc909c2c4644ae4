import type { KV } from '@nats-io/kv';
import { BUCKETS } from '@troupe/protocol';
import { listKeys, openKv } from '../durable/kvStore.ts';
import type { JetStreamBus } from '../transport/bus.ts';

/** Where a memory lives: this task only, or this agent across tasks. */
export type MemoryScope = 'task' | 'agent';

/** Who remembers: the task, and the pipeline and agent for long-term memory. */
export interface MemoryOwner {
  pipeline: string;
  agent: string;
  taskId: string;
  /** Long-term memory is opt-in per agent. */
  longTerm: boolean;
}

/** Memory for one agent in one task; the tools `remember` and `recall` use it. */
export interface MemoryView {
  readonly longTerm: boolean;
  put(scope: MemoryScope, key: string, value: string): Promise<void>;
  get(scope: MemoryScope, key: string): Promise<string | undefined>;
  keys(scope: MemoryScope): Promise<string[]>;
}

/**
 * Memory in the KV bucket `memory`: `task.<pipeline>.<taskId>.<key>`, and `agent.<pipeline>.<agent>.<key>` for
 * long-term (the pipeline in both, so the broker can keep each pipeline's workers to their own).
 */
export class KvMemory {
  readonly #kv: KV;
  readonly #bus: JetStreamBus;

  private constructor(kv: KV, bus: JetStreamBus) {
    this.#kv = kv;
    this.#bus = bus;
  }

  static async open(bus: JetStreamBus): Promise<KvMemory> {
    return new KvMemory(await openKv(bus, BUCKETS.memory), bus);
  }

  /** A view scoped to one agent in one task. */
  view(owner: MemoryOwner): MemoryView {
    const prefix = (scope: MemoryScope) =>
      scope === 'task' ? `task.${owner.pipeline}.${owner.taskId}` : `agent.${owner.pipeline}.${owner.agent}`;
    const kv = this.#kv;
    const bus = this.#bus;
    return {
      longTerm: owner.longTerm,
      async put(scope, key, value) {
        await kv.put(`${prefix(scope)}.${key}`, value);
      },
      async get(scope, key) {
        const entry = await kv.get(`${prefix(scope)}.${key}`);
        return entry && entry.operation === 'PUT' ? entry.string() : undefined;
      },
      async keys(scope) {
        const start = `${prefix(scope)}.`;
        const found = await listKeys(bus, BUCKETS.memory, `${start}>`);
        return found.map((key) => key.slice(start.length)).sort();
      },
    };
  }
}
