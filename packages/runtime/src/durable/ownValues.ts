import { isDeepStrictEqual } from 'node:util';
import type { z } from 'zod';

/**
 * Whether values Troupe's own code builds (events, KV records it writes) are checked against their schemas as they
 * are built: `TROUPE_STRICT=1`, which vitest.config.ts sets for every test. Elsewhere they are not parsed again:
 * their types are the schemas' own, what went into them was parsed where it arrived (a task message, an agent's
 * reply), and whoever reads them back parses what it reads (docs/protocol.md, "Who validates what").
 */
export const strictOwnValues = (): boolean => process.env.TROUPE_STRICT === '1';

/**
 * `value` parsed by `schema`, failing when it does not match (a ZodError naming the field, as any parse) or, with
 * `strict`, when the parse would change it (an undeclared field dropped, a default filled in, a value transformed):
 * what skipping the parse outside tests would then store or publish differently.
 */
export function checkedOwnValue<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
  strict: boolean,
): z.infer<S> {
  const parsed = schema.parse(value);
  if (strict && !isDeepStrictEqual(asJson(parsed), asJson(value))) {
    throw new Error(
      `${what} was built unlike its schema (it would be stored or sent otherwise without a parse): ` +
        `built ${JSON.stringify(value)}, parsed ${JSON.stringify(parsed)}`,
    );
  }
  return parsed;
}

/** A value as JSON carries it: undefined fields gone (the comparison ignores key order). */
function asJson(value: unknown): unknown {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}
