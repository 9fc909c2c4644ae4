/** The in-memory KV bucket lives in `@troupe/runtime` (durable/memoryKv.ts), which `troupe run` uses too. */
export { MemoryKv } from '@troupe/runtime';
