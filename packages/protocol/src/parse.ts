import type { z } from 'zod';

/** One problem found in a message, with the path inside it. */
export interface Issue {
  path: string;
  message: string;
}

/** The outcome of decoding bytes into a typed message: a value, or the reasons it is not one. */
export type ParseResult<T> =
  | { ok: true; value: T }
  | {
      ok: false;
      reason: string;
      issues: Issue[];
      /** The limit the payload passed, when that is why it was refused. */
      limit?: keyof ParseLimits;
    };

/**
 * How deep any message may nest (objects and arrays) before it is refused unread: deeper JSON would exhaust the
 * stack of the code that walks it later (schema checks, snapshots, `JSON.stringify`). Task payloads have a
 * tighter, configurable limit (see the coordinator's intake limits).
 */
export const MAX_MESSAGE_DEPTH = 128;

/** Limits checked before a payload is validated. */
export interface ParseLimits {
  /** Most bytes accepted; unlimited when absent (NATS's `max_payload` bounds every message anyway). */
  maxBytes?: number;
  /** Most levels of nested objects and arrays; {@link MAX_MESSAGE_DEPTH} when absent. */
  maxDepth?: number;
}

const decoder = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

/**
 * Decodes UTF-8 JSON bytes and validates them against a schema. Never throws: a payload that is not UTF-8, not
 * JSON, larger or deeper than `limits`, or that fails the schema is refused with a reason.
 */
export function parseMessage<S extends z.ZodType>(
  schema: S,
  bytes: Uint8Array | string,
  limits: ParseLimits = {},
): ParseResult<z.infer<S>> {
  const decoded = decodeMessage(bytes, limits);
  return decoded.ok ? validateMessage(schema, decoded.value) : decoded;
}

/**
 * The first half of {@link parseMessage}: UTF-8 JSON bytes decoded, within `limits`, not yet validated. For a
 * reader that picks the schema from what the message is (a heartbeat or a reply), so the JSON is parsed once.
 */
export function decodeMessage(bytes: Uint8Array | string, limits: ParseLimits = {}): ParseResult<unknown> {
  if (limits.maxBytes !== undefined) {
    const size = typeof bytes === 'string' ? encoder.encode(bytes).length : bytes.length;
    if (size > limits.maxBytes)
      return {
        ok: false,
        reason: `payload is ${size} bytes; the limit is ${limits.maxBytes}`,
        issues: [],
        limit: 'maxBytes',
      };
  }
  let text: string;
  let json: unknown;
  try {
    text = typeof bytes === 'string' ? bytes : decoder.decode(bytes);
  } catch {
    return { ok: false, reason: 'payload is not valid UTF-8', issues: [] };
  }
  try {
    json = JSON.parse(text);
  } catch (error) {
    return { ok: false, reason: `payload is not JSON: ${(error as Error).message}`, issues: [] };
  }
  const maxDepth = limits.maxDepth ?? MAX_MESSAGE_DEPTH;
  // Most messages cannot nest that deep, which a count of their brackets shows without walking what was parsed.
  if (!fewBrackets(text, maxDepth) && exceedsDepth(json, maxDepth)) {
    return {
      ok: false,
      reason: `payload nests objects and arrays more than ${maxDepth} levels deep`,
      issues: [],
      limit: 'maxDepth',
    };
  }
  return { ok: true, value: json };
}

/** The second half of {@link parseMessage}: a decoded value checked against a schema. */
export function validateMessage<S extends z.ZodType>(schema: S, json: unknown): ParseResult<z.infer<S>> {
  const result = schema.safeParse(json);
  if (result.success) return { ok: true, value: result.data };
  const issues = formatIssues(result.error.issues);
  return { ok: false, reason: `payload failed validation: ${issues.map(describe).join('; ')}`, issues };
}

/**
 * Whether a parsed JSON value nests objects and arrays more than `max` levels (a scalar is 0 levels, `{}` is 1).
 * Walks with an explicit stack, so no depth of input can overflow it, and stops at the first path too deep.
 */
export function exceedsDepth(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [item, depth] = next;
    if (typeof item !== 'object' || item === null) continue;
    if (depth + 1 > max) return true;
    const children = Array.isArray(item) ? item : Object.values(item);
    for (const child of children) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

const OPENING_BRACKETS = ['{', '['] as const;

/**
 * Whether JSON text opens at most `max` objects and arrays (counting `{` and `[` inside strings too): then none of
 * its values nests more than `max` levels, since each level opens one. A native search per bracket, no allocation.
 */
function fewBrackets(text: string, max: number): boolean {
  let opened = 0;
  for (const bracket of OPENING_BRACKETS) {
    for (let at = text.indexOf(bracket); at !== -1; at = text.indexOf(bracket, at + 1)) {
      if (++opened > max) return false;
    }
  }
  return true;
}

/** Turns zod issues into `{ path, message }` pairs with dotted paths (`input.files[0]`). */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): Issue[] {
  return issues.map((issue) => ({ path: formatPath(issue.path), message: issue.message }));
}

export function formatPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((out, key) => {
    if (typeof key === 'number') return `${out}[${key}]`;
    return out === '' ? String(key) : `${out}.${String(key)}`;
  }, '');
}

const describe = (issue: Issue): string =>
  issue.path === '' ? issue.message : `${issue.path}: ${issue.message}`;
