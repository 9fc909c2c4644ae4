import { WorkflowRecord } from '@troupe/coordinator';
import { BUCKETS } from '@troupe/protocol';
import type { KvStore, NatsBus } from '@troupe/runtime';
import type { z } from 'zod';
import { openIfAny, openOrExplain } from './kvBuckets.ts';
import { CliError } from './server.ts';

export type WorkflowStore = KvStore<typeof WorkflowRecord>;

/** KV `workflows`; a server no coordinator has used has none, which is said plainly. */
export function openWorkflows(bus: NatsBus): Promise<WorkflowStore> {
  return openOrExplain(bus, BUCKETS.workflows, WorkflowRecord);
}

/** KV `workflows`, or undefined when no coordinator has run on the server. */
export async function workflowsIfAny(bus: NatsBus): Promise<WorkflowStore | undefined> {
  try {
    return await openIfAny(bus, BUCKETS.workflows, WorkflowRecord);
  } catch (error) {
    throw new CliError((error as Error).message);
  }
}

/** A task's record in KV `workflows`; undefined when it has none, or no coordinator has run on the server. */
export async function workflowRecord(bus: NatsBus, taskId: string): Promise<WorkflowRecord | undefined> {
  return (await (await workflowsIfAny(bus))?.get(taskId))?.value;
}

/** Reads this many records at once: a server far away answers a thousand tasks in seconds, not minutes. */
const PARALLEL_READS = 32;

/** The values of these keys (every key by default) that exist and parse, in no particular order. */
export async function readValues<S extends z.ZodType>(
  store: KvStore<S>,
  keys?: string[],
): Promise<z.infer<S>[]> {
  const pending = [...(keys ?? (await store.keys()))];
  const values: z.infer<S>[] = [];
  const reader = async () => {
    for (let key = pending.pop(); key !== undefined; key = pending.pop()) {
      const entry = await store.get(key);
      if (entry) values.push(entry.value);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_READS, pending.length) }, reader));
  return values;
}

/** How long a task ran: to its final event (or last update) once it has ended, else so far. */
export function taskDuration(record: WorkflowRecord, now: number): { ms: number; finished: boolean } {
  const start = Date.parse(record.createdAt);
  if (record.status === 'running') return { ms: Math.max(0, now - start), finished: false };
  // Records written before `final` was kept end at their last update.
  const end = Date.parse(record.final?.ts ?? '') || Date.parse(record.updatedAt);
  return { ms: Math.max(0, end - start), finished: true };
}
