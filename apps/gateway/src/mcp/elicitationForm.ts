import type { ElicitRequestFormParams } from '@modelcontextprotocol/server';

/** The form an elicitation may show: an object of flat fields (text, number, yes/no, a choice). */
export type ElicitationForm = ElicitRequestFormParams['requestedSchema'];
type Field = ElicitationForm['properties'][string];

const STRING_FORMATS = ['email', 'uri', 'date', 'date-time'];

/**
 * A `human` step's answer schema as an elicitation form, when MCP's forms can show it: an object whose properties
 * are each a string (or a choice of strings), a number or integer, or a boolean. Constraints a form cannot carry
 * (a pattern, say) are left out: the step checks every answer against its whole schema and asks again on a miss.
 * Undefined for any other shape, which is then asked as text.
 */
export function elicitationForm(schema: unknown): ElicitationForm | undefined {
  if (!isRecord(schema) || schema.type !== 'object' || !isRecord(schema.properties)) return undefined;
  const properties: Record<string, Field> = {};
  for (const [key, property] of Object.entries(schema.properties)) {
    const field = fieldOf(property);
    if (!field) return undefined;
    properties[key] = field;
  }
  if (Object.keys(properties).length === 0) return undefined;
  const required = Array.isArray(schema.required)
    ? schema.required.filter((k): k is string => typeof k === 'string' && k in properties)
    : [];
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}) };
}

function fieldOf(property: unknown): Field | undefined {
  if (!isRecord(property)) return undefined;
  const text = pick(property, ['title', 'description'], 'string');
  const enumOf = property.enum;
  if (Array.isArray(enumOf)) {
    if (!enumOf.every((v) => typeof v === 'string') || (property.type ?? 'string') !== 'string')
      return undefined;
    return { type: 'string', ...text, enum: enumOf, ...pick(property, ['default'], 'string') };
  }
  switch (property.type) {
    case 'string':
      return {
        type: 'string',
        ...text,
        ...pick(property, ['minLength', 'maxLength'], 'number'),
        ...pick(property, ['default'], 'string'),
        ...(STRING_FORMATS.includes(property.format as string)
          ? { format: property.format as 'email' | 'uri' | 'date' | 'date-time' }
          : {}),
      };
    case 'number':
    case 'integer':
      return { type: property.type, ...text, ...pick(property, ['minimum', 'maximum', 'default'], 'number') };
    case 'boolean':
      return { type: 'boolean', ...text, ...pick(property, ['default'], 'boolean') };
    default:
      return undefined;
  }
}

/** The keys of `from` whose values are of `type`. */
function pick(from: Record<string, unknown>, keys: readonly string[], type: 'string' | 'number' | 'boolean') {
  return Object.fromEntries(keys.filter((k) => typeof from[k] === type).map((k) => [k, from[k]]));
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
