import { BUCKETS } from '@troupe/protocol';
import { z } from 'zod';
import type { ToolCallResult } from '../tools/toolExecutor.ts';
import type { NatsBus } from '../transport/natsBus.ts';
import { KvStore } from './kvStore.ts';

/** One tool call that ran, with what it returned. */
export const JournalEntry = z.object({
  tool: z.string(),
  arguments: z.string(),
  result: z.object({
    ok: z.boolean(),
    output: z.string(),
    error: z.object({ code: z.string(), message: z.string() }).optional(),
    decision: z.enum(['allow', 'deny', 'ask']),
    truncated: z.object({ originalBytes: z.number() }).optional(),
  }),
  recordedAt: z.string(),
});
export type JournalEntry = z.infer<typeof JournalEntry>;

/**
 * The journal of tool calls in the KV bucket `journal`. A call's key is deterministic — its step (task, step,
 * round), the agent's turn in that step and the call's position — so a step that runs again after a crash
 * meets the calls it already made and takes their recorded results instead of running them twice.
 */
export class ToolJournal {
  readonly #store: KvStore<typeof JournalEntry>;

  private constructor(store: KvStore<typeof JournalEntry>) {
    this.#store = store;
  }

  static async open(bus: NatsBus): Promise<ToolJournal> {
    return new ToolJournal(await KvStore.open(bus, BUCKETS.journal, JournalEntry));
  }

  /** `<taskId>.<step>.<round>.<turn>.<index>`. */
  static key(stepId: string, turn: number, index: number): string {
    return `${stepId}.${turn}.${index}`;
  }

  /** The recorded result of this exact call (same tool, same arguments), if it already ran. */
  async replay(key: string, tool: string, args: string): Promise<JournalEntry['result'] | undefined> {
    const entry = (await this.#store.get(key))?.value;
    return entry && entry.tool === tool && entry.arguments === args ? entry.result : undefined;
  }

  async record(key: string, args: string, result: ToolCallResult, now: Date): Promise<void> {
    const { ok, output, error, decision, truncated } = result;
    await this.#store.put(key, {
      tool: result.tool,
      arguments: args,
      result: { ok, output, decision, ...(error ? { error } : {}), ...(truncated ? { truncated } : {}) },
      recordedAt: now.toISOString(),
    });
  }
}
