import type { JsonSchema } from '@troupe/llm';
import { type StepExpect, Verdict } from '@troupe/protocol';
import { z } from 'zod';

/** A structured reply the agent must give: a name for the provider and the JSON Schema it must match. */
export interface OutputSpec {
  name: string;
  schema: JsonSchema;
}

/** What a step's final reply must be: a reviewer's verdict, text, or text matching the agent's declared output. */
export interface ReplyShape {
  expect: StepExpect;
  outputSchema?: OutputSpec | undefined;
}

/** A verdict is repaired at most this often before the step fails. */
export const MAX_REPAIRS = 1;

/** Reads a verdict from a reply: the whole text, or the first JSON object in it that is one (models like code fences). */
export function parseVerdict(content: string): Verdict | undefined {
  return parseStructured(content, Verdict) as Verdict | undefined;
}

/** Reads a structured reply: the whole text as JSON, or the first JSON object in it that matches the schema. */
export function parseStructured(content: string, schema: z.ZodType): unknown {
  for (const candidate of [content.trim(), ...jsonObjects(content)]) {
    let value: unknown;
    try {
      value = JSON.parse(candidate);
    } catch {
      continue;
    }
    const parsed = schema.safeParse(value);
    if (parsed.success) return parsed.data;
  }
  return undefined;
}

/** Each balanced `{…}` span in the text, in order, skipping braces inside JSON strings. */
function* jsonObjects(text: string): Generator<string> {
  for (let start = text.indexOf('{'); start !== -1; start = text.indexOf('{', start + 1)) {
    const end = matchingBrace(text, start);
    if (end !== -1) yield text.slice(start, end + 1);
  }
}

function matchingBrace(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const char = text[i];
    if (inString) {
      if (char === '\\') i++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === '{') depth++;
    else if (char === '}' && --depth === 0) return i;
  }
  return -1;
}

const VERDICT_SCHEMA: JsonSchema = (() => {
  const { $schema: _drop, ...schema } = z.toJSONSchema(Verdict, { io: 'input' }) as JsonSchema;
  return schema;
})();

/** zod schemas built from declared JSON Schemas, kept per schema object. */
const compiled = new WeakMap<JsonSchema, z.ZodType>();

/** The schema the final reply is checked against; undefined when any text will do. */
export function outputSchemaOf(shape: ReplyShape): z.ZodType | undefined {
  if (shape.expect === 'verdict') return Verdict;
  const spec = shape.outputSchema;
  return spec ? compiledSchema(spec.schema) : undefined;
}

function compiledSchema(json: JsonSchema): z.ZodType {
  let schema = compiled.get(json);
  if (!schema) {
    schema = z.fromJSONSchema(json as Parameters<typeof z.fromJSONSchema>[0]);
    compiled.set(json, schema);
  }
  return schema;
}

/**
 * Whether a model reply ends its step, as the agent machine decides after the call: it asks for no tool, is not
 * empty, and matches the output asked of the provider (`responseSchema` of the call, see {@link responseSchemaOf}).
 */
export function endsStep(
  reply: { content: string; toolCalls: readonly unknown[] },
  responseSchema: OutputSpec | undefined,
): boolean {
  if (reply.toolCalls.length > 0 || reply.content.trim() === '') return false;
  if (responseSchema === undefined) return true;
  const schema = responseSchema.schema === VERDICT_SCHEMA ? Verdict : compiledSchema(responseSchema.schema);
  return parseStructured(reply.content, schema) !== undefined;
}

/** The structured output asked of the provider natively, if any. */
export function responseSchemaOf(shape: ReplyShape): OutputSpec | undefined {
  if (shape.expect === 'verdict') return { name: 'verdict', schema: VERDICT_SCHEMA };
  return shape.outputSchema;
}

export const outputName = (shape: ReplyShape): string =>
  shape.expect === 'verdict' ? 'verdict' : `output "${shape.outputSchema?.name ?? ''}"`;

/** What the model is told after a reply that did not match: the shape again, plainly. */
export function repairPrompt(shape: ReplyShape): string {
  if (shape.expect === 'verdict') {
    return (
      'Your reply was not a valid verdict. Reply with only a JSON object of the form ' +
      '{"decision": "approve" | "reject", "feedback": "<what must change, or a short note>"}.'
    );
  }
  return `Your reply did not match the required ${outputName(shape)}. Reply with only a JSON value matching this JSON Schema:\n${JSON.stringify(responseSchemaOf(shape)?.schema)}`;
}
