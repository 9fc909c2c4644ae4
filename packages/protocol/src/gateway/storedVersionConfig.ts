import { z } from 'zod';

/**
 * Of a pipeline version in the `versions` bucket, only its config, read loosely: the coordinator validated it when it
 * stored it. What a gateway reads of it (a `human` step's declared answer).
 */
export const StoredVersionConfig = z.object({ config: z.record(z.string(), z.unknown()) });
export type StoredVersionConfig = z.infer<typeof StoredVersionConfig>;
