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

/**
 * The object store bucket of a pipeline's task inputs too large for a task message: apart from its values, so that
 * submitters, who may write here, can touch no step's output.
 */
export function inputBucket(pipeline: string): string {
  if (!isName(pipeline)) throw new Error(`not a pipeline name: ${pipeline}`);
  return `troupe-inputs-${pipeline}`;
}

/** The name a task's stored input starts with: `<taskId>.input.`, followed by the start of its digest. */
export const inputObjectPrefix = (taskId: string): string => `${taskId}.input.`;

/**
 * What a task's input as its workflow carries it leaves out: the keys of `input` that hold only a preview, and where
 * the whole input is. A step's host reads the whole back and puts each of those keys' values in place.
 */
export const InputCut = z.strictObject({
  ref: ValueRef,
  keys: z.array(z.string()).min(1),
});
export type InputCut = z.infer<typeof InputCut>;

/** `input` with each key the cut names given its value in the whole input (`stored`: its JSON, as it was stored). */
export function fillInput(
  input: Record<string, unknown> | undefined,
  cut: InputCut,
  stored: string,
): Record<string, unknown> {
  const whole = JSON.parse(stored) as Record<string, unknown>;
  return { ...input, ...Object.fromEntries(cut.keys.map((key) => [key, whole[key]])) };
}
