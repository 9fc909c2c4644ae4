/**
 * `@troupe/runtime/bus`: the NATS side of the runtime alone — the connection (`NatsBus`), its errors, JetStream, the
 * KV and object stores, the stored event history, logging — for clients of a running Troupe (`@troupe/client`) that
 * must not load the agent runtime, its model providers, MCP client or tracing.
 */
export { closedByEnding, describeEnding } from './approvals/taskEnded.ts';
export { type EventHistoryOptions, readEventHistory, type StoredEvent } from './durable/eventHistory.ts';
export { isOutage, type KeyValue, type KvEntry, KvStore, throughOutages } from './durable/kvStore.ts';
export { NewerJournalRecordError } from './durable/newerJournalRecord.ts';
export { ObjectBucket, type ObjectBucketConnection, type ObjectListing } from './durable/objectBucket.ts';
export { type JournalEntry, StepJournal } from './durable/stepJournal.ts';
export { ValueStore, type ValueStoreOptions } from './durable/valueStore.ts';
export { ValueStoreError, type ValueStoreErrorCode } from './durable/valueStoreError.ts';
export * from './logging/index.ts';
export { mapLimit } from './mapLimit.ts';
export * from './transport/index.ts';
