import type { z } from 'zod';

/** One problem found in a message, with the path inside it. */
export interface Issue {
  path: string;
  message: string;
}

/** The outcome of decoding bytes into a typed message: a value, or the reasons it is not one. */
export type ParseResult<T> = { ok: true; value: T } | { ok: false; reason: string; issues: Issue[] };

const decoder = new TextDecoder('utf-8', { fatal: true });

/** Decodes UTF-8 JSON bytes and validates them against a schema. Never throws. */
export function parseMessage<S extends z.ZodType>(
  schema: S,
  bytes: Uint8Array | string,
): ParseResult<z.infer<S>> {
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
  const result = schema.safeParse(json);
  if (result.success) return { ok: true, value: result.data };
  const issues = formatIssues(result.error.issues);
  return { ok: false, reason: `payload failed validation: ${issues.map(describe).join('; ')}`, issues };
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
