import {
  errorMessage,
  type InputCut,
  inputBucket,
  inputObjectPrefix,
  parseStoredInput,
  type ValueRef,
} from '@troupe/protocol';
import { PREVIEW_BYTES, utf8Head, type ValueStore, ValueStoreError } from '@troupe/runtime';
import type { IntakeLimits } from './intakeLimits.ts';

/**
 * How much of a stored input a task's workflow keeps (its JSON): the rest is cut to previews, key by key, largest
 * first, so that its checkpoints and the step requests that carry the input stay far below NATS's 1 MiB.
 */
export const INPUT_KEEP_BYTES = 64 * 1024;

/** A task's stored input as its workflow carries it, or why the task cannot run. */
export type StoredInput =
  | { ok: true; input: Record<string, unknown>; cut?: InputCut }
  | {
      ok: false;
      reason: string;
      /** The input will never be readable (another task's, gone, corrupt, too large): the task is refused. */
      lasting: true;
    };

/**
 * Reads the input a task names by `inputRef`, once it is checked to be this task's (in the pipeline's inputs
 * bucket, under a name that starts with `<taskId>.input.`) and within the limits. A store that cannot be reached now
 * throws: the delivery comes back later.
 */
export async function readStoredInput(
  values: Pick<ValueStore, 'read'>,
  pipeline: string,
  taskId: string,
  ref: ValueRef,
  limits: IntakeLimits,
): Promise<StoredInput> {
  const refuse = (reason: string): StoredInput => ({ ok: false, reason, lasting: true });
  if (ref.bucket !== inputBucket(pipeline)) {
    return refuse(
      `inputRef names bucket ${ref.bucket}; a task of ${pipeline} has its input in ${inputBucket(pipeline)}`,
    );
  }
  if (!ref.name.startsWith(inputObjectPrefix(taskId))) {
    return refuse(
      `inputRef names object "${ref.name}"; task ${taskId}'s input is named ${inputObjectPrefix(taskId)}…`,
    );
  }
  if (ref.bytes > limits.maxInputBytes) {
    return refuse(
      `the task's stored input is ${ref.bytes} bytes; the limit is ${limits.maxInputBytes} (raise it with troupe up --max-input-bytes)`,
    );
  }
  let text: string;
  try {
    text = await values.read(ref);
  } catch (error) {
    if (ValueStoreError.is(error, 'value_missing') || ValueStoreError.is(error, 'value_corrupt')) {
      return refuse(`cannot read the task's stored input: ${errorMessage(error)}`);
    }
    throw error;
  }
  const parsed = parseStoredInput(text, limits);
  if (!parsed.ok) return refuse(parsed.reason.replace(/^payload/, "the task's stored input"));
  const kept = cutInput(parsed.value, ref);
  if (kept === undefined) {
    return refuse(
      `the task's stored input has too many keys to carry: even with each large one cut to a preview, it is over ${INPUT_KEEP_BYTES} bytes`,
    );
  }
  return { ok: true, ...kept };
}

/**
 * The input as a workflow carries it: whole when it is small, else with its largest keys' values cut to previews
 * (largest first, until the rest fits {@link INPUT_KEEP_BYTES}) and an {@link InputCut} saying which and where the
 * whole is. Undefined when no cut makes it fit (thousands of small keys).
 */
export function cutInput(
  whole: Record<string, unknown>,
  ref: ValueRef,
  keepBytes = INPUT_KEEP_BYTES,
): { input: Record<string, unknown>; cut?: InputCut } | undefined {
  const sizes = new Map(Object.entries(whole).map(([key, value]) => [key, jsonBytes(value)]));
  let total = jsonBytes(whole);
  if (total <= keepBytes) return { input: whole };
  const input = { ...whole };
  const keys: string[] = [];
  // Cutting a value no larger than its preview would gain nothing.
  const largest = [...sizes].filter(([, size]) => size > PREVIEW_BYTES).sort((a, b) => b[1] - a[1]);
  for (const [key, size] of largest) {
    if (total <= keepBytes) break;
    const preview = previewOfKey(key, whole[key], size, ref);
    input[key] = preview;
    total += jsonBytes(preview) - size;
    keys.push(key);
  }
  if (total > keepBytes) return undefined;
  return { input, cut: { ref, keys } };
}

function previewOfKey(key: string, value: unknown, size: number, ref: ValueRef): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  const head = utf8Head(Buffer.from(text, 'utf8'), PREVIEW_BYTES);
  return `${head}\n…[cut: showing ${Buffer.byteLength(head, 'utf8')} of ${size} bytes of input.${key}; the whole input is object "${ref.name}" in NATS object store ${ref.bucket}, sha256 ${ref.sha256}]`;
}

const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value) ?? 'null', 'utf8');
