/** The in-memory intake lives in src (intake/memoryTaskIntake.ts), which `troupe run` uses; tests import it here. */
export { type MemoryDelivery, MemoryTaskIntake, type Settlement } from '../src/intake/memoryTaskIntake.ts';
