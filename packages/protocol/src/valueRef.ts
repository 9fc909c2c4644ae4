import { z } from 'zod';
import { isName } from './names.ts';

/**
 * Where the whole of a value too large for a message is kept: an object in a NATS object store. A message that
 * carries one holds a preview of the value in its place (its start, and a line saying where the rest is); readers
 * that need the whole (the next step's prompt, a trace, the gateway's task result, a replay) read it back here.
 */
export const ValueRef = z.strictObject({
  /** The object store bucket: `troupe-values-<pipeline>` (see {@link valueBucket}). */
  bucket: z.string().regex(/^[-\w]{1,200}$/),
  /** The object's name, made from the ids of what produced it, so a step run again writes the same object. */
  name: z.string().min(1).max(1_000),
  /** Size of the whole value in UTF-8 bytes. */
  bytes: z.number().int().nonnegative(),
  /** SHA-256 of those bytes, hex: a read that gives anything else is refused. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type ValueRef = z.infer<typeof ValueRef>;

/** The object store bucket of a pipeline's large values: one per pipeline, so permissions can scope each to its own. */
export function valueBucket(pipeline: string): string {
  if (!isName(pipeline)) throw new Error(`not a pipeline name: ${pipeline}`);
  return `troupe-values-${pipeline}`;
}
