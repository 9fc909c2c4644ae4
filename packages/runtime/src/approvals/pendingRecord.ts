import type { HumanRequest } from '@troupe/protocol';
import { type KeyValue, throughOutages } from '../durable/kvStore.ts';

/** How many times a pending request's record is written again over a change made meanwhile that left it pending. */
const ATTEMPTS = 3;

/**
 * Writes `change` of a person's request over its record while the record is pending, compared and set: a write lost
 * to one that left it pending (a hold or let-go, the coordinator's or its asker's) is tried again over the record as
 * it is now; one lost to a decision, or a record decided or closed already, leaves it as it is; `change` answering
 * undefined (the record is as asked already) writes nothing. Whether it wrote.
 */
export async function rewritePending(
  store: KeyValue<HumanRequest>,
  id: string,
  change: (record: HumanRequest) => HumanRequest | undefined,
): Promise<boolean> {
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const entry = await throughOutages(() => store.get(id));
    if (entry === undefined || entry.value.status !== 'pending') return false;
    const next = change(entry.value);
    if (next === undefined) return false;
    if ((await throughOutages(() => store.update(id, next, entry.revision))) !== undefined) return true;
  }
  return false;
}
