/**
 * What a JSON Schema says a value is, as far as a condition can use it: the shape the loader type-checks CEL
 * conditions against. Anything the schema leaves open (no `type`, `anyOf`, a `$ref`, a type that may be null) is
 * `dyn`, which CEL checks only when the task runs.
 */
export type Shape =
  | { kind: 'dyn' }
  /** `values`: the only strings it may be (its `enum` or `const`), when the schema says. */
  | { kind: 'string'; values?: readonly string[] }
  | { kind: 'bool' }
  | { kind: 'number' }
  | { kind: 'list'; of: Shape }
  /** An object whose keys the schema does not name (`additionalProperties: { … }` and no `properties`). */
  | { kind: 'map'; of: Shape }
  /** An object with named keys; `closed` when it allows no others (`additionalProperties: false`). */
  | ObjectShape;

export interface ObjectShape {
  kind: 'object';
  fields: Record<string, Shape>;
  closed: boolean;
}

export const DYN: Shape = { kind: 'dyn' };
export const NUMBER: Shape = { kind: 'number' };
export const STRING: Shape = { kind: 'string' };

/** An open object with these fields: any other key reads as `dyn`. */
export const openObject = (fields: Record<string, Shape> = {}): ObjectShape => ({
  kind: 'object',
  fields,
  closed: false,
});

/** The shape of the values `schema` admits. */
export function shapeOf(schema: unknown): Shape {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return DYN;
  const s = schema as Record<string, unknown>;
  // A schema that combines others, or refers elsewhere, admits more than one shape: CEL has no unions.
  if (['anyOf', 'oneOf', 'allOf', '$ref', 'not', 'if'].some((key) => key in s)) return DYN;
  const type = typeof s.type === 'string' ? s.type : fromValues(s);
  switch (type) {
    case 'string': {
      const values = Array.isArray(s.enum) ? s.enum : 'const' in s ? [s.const] : undefined;
      return values?.every((v) => typeof v === 'string') ? { kind: 'string', values } : STRING;
    }
    case 'boolean':
      return { kind: 'bool' };
    case 'number':
    case 'integer':
      return NUMBER;
    case 'array':
      return { kind: 'list', of: shapeOf(s.items) };
    case 'object':
      return objectShape(s);
    default:
      return DYN;
  }
}

function objectShape(s: Record<string, unknown>): Shape {
  const properties = s.properties;
  const extra = s.additionalProperties;
  const named = typeof properties === 'object' && properties !== null && !Array.isArray(properties);
  if (!named && typeof extra === 'object' && extra !== null) return { kind: 'map', of: shapeOf(extra) };
  const fields = Object.fromEntries(
    Object.entries(named ? (properties as Record<string, unknown>) : {}).map(([key, field]) => [
      key,
      shapeOf(field),
    ]),
  );
  return { kind: 'object', fields, closed: extra === false };
}

/** The type an `enum` or `const` implies when the schema names none: their values' one JSON type, if they share it. */
function fromValues(s: Record<string, unknown>): string | undefined {
  const values = Array.isArray(s.enum) ? s.enum : 'const' in s ? [s.const] : [];
  const types = new Set(values.map((v) => typeof v));
  const [only] = types;
  return types.size === 1 && (only === 'string' || only === 'boolean' || only === 'number')
    ? only
    : undefined;
}
