import { z } from 'zod';
import { formatIssues, type Issue } from './parse.ts';

/** Validators built from pipelines' input schemas, by the schema's JSON: a pipeline's tasks share one. */
const built = new Map<string, z.ZodType>();
const MAX_BUILT = 256;

function validatorOf(schema: Record<string, unknown>): z.ZodType {
  const key = JSON.stringify(schema);
  let validator = built.get(key);
  if (validator === undefined) {
    validator = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
    if (built.size >= MAX_BUILT) built.delete(built.keys().next().value ?? '');
    built.set(key, validator);
  }
  return validator;
}

/** The key a gateway session adds to each follow-up's input: the conversation so far. */
const SESSION_KEY = 'session';

/**
 * Whether a task's input matches the JSON Schema its pipeline declares under `input:` (an absent input is checked as
 * `{}`, so a schema's required keys are required of every task). The reason names each key that does not fit.
 * `input.session`, which the gateway's sessions add, is the runtime's, not the submitter's: it is checked only when
 * the schema declares it, so a closed schema (`additionalProperties: false`) still takes a session's follow-ups.
 */
export function checkTaskInput(
  schema: Record<string, unknown>,
  input: Record<string, unknown> | undefined,
): { ok: true } | { ok: false; reason: string; issues: Issue[] } {
  const declared = (schema.properties as Record<string, unknown> | undefined)?.[SESSION_KEY] !== undefined;
  const { [SESSION_KEY]: _session, ...own } = input ?? {};
  // zod's fromJSONSchema applies properties, required and additionalProperties only under type: object, where JSON
  // Schema applies them to any object; an input is always one, so a schema without a type is read as an object's.
  const objectSchema = schema.type === undefined ? { ...schema, type: 'object' } : schema;
  const parsed = validatorOf(objectSchema).safeParse(declared ? (input ?? {}) : own);
  if (parsed.success) return { ok: true };
  const issues = formatIssues(parsed.error.issues).map((i) => ({
    ...i,
    path: i.path ? `input.${i.path}` : 'input',
  }));
  return {
    ok: false,
    reason: `the input does not match the pipeline's input schema: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
    issues,
  };
}
