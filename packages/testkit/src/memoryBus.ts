import { type MemoryBusOptions, MemoryBus as RuntimeMemoryBus } from '@troupe/runtime';

export type { CarriedMessage, MemoryBusOptions } from '@troupe/runtime';

/**
 * The runtime's in-process bus with its history kept (`keepHistory` on unless told otherwise), so tests can assert
 * on {@link RuntimeMemoryBus.messages} and {@link RuntimeMemoryBus.events}. The bus itself lives in
 * `@troupe/runtime` (transport/memoryBus.ts), which `troupe run` uses with no history.
 */
export class MemoryBus extends RuntimeMemoryBus {
  constructor(options: MemoryBusOptions = {}) {
    super({ keepHistory: true, ...options });
  }
}
