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

/**
 * Whether a task's input matches the JSON Schema its pipeline declares under `input:` (an absent input is checked as
 * `{}`, so a schema's required keys are required of every task). The reason names each key that does not fit.
 */
export function checkTaskInput(
  schema: Record<string, unknown>,
  input: Record<string, unknown> | undefined,
): { ok: true } | { ok: false; reason: string; issues: Issue[] } {
  const parsed = validatorOf(schema).safeParse(input ?? {});
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
