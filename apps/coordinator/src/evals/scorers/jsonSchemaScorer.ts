import type { ScorerSpec } from '@troupe/protocol';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { type Check, parseJsonText, quoted } from './check.ts';
import { outputOf } from './textScorers.ts';

/**
 * The output is JSON (alone, or in a code fence) that the spec's JSON Schema accepts, checked with Ajv: draft-07
 * unless the schema's `$schema` names 2020-12. The schema is compiled now, so an unusable one is refused at once.
 */
export function jsonSchemaCheck(spec: Extract<ScorerSpec, { type: 'jsonSchema' }>): Check {
  const validate = compiled(spec.schema);
  return (run) => {
    const output = outputOf(run);
    if (typeof output !== 'string') return output;
    const parsed = parseJsonText(output);
    if (!parsed) return { value: 0, reason: `the output is not JSON: ${quoted(output)}` };
    if (validate(parsed.value)) return { value: 1, reason: 'the output is JSON that the schema accepts' };
    return { value: 0, reason: `the schema refuses the output: ${described(validate.errors ?? [])}` };
  };
}

function compiled(schema: Record<string, unknown>): ValidateFunction {
  const draft2020 = typeof schema.$schema === 'string' && schema.$schema.includes('2020-12');
  // Formats Ajv does not know (`email`, …) are let through rather than refused: no formats package is loaded.
  const options = { allErrors: true, strict: false, validateFormats: false } as const;
  const ajv = draft2020 ? new Ajv2020(options) : new Ajv(options);
  try {
    return ajv.compile(schema);
  } catch (error) {
    throw new Error(`not a usable JSON Schema: ${(error as Error).message}`);
  }
}

function described(errors: readonly ErrorObject[]): string {
  const shown = errors.slice(0, 5).map((error) => `${error.instancePath || '(the whole)'} ${error.message}`);
  const more = errors.length > 5 ? ` (and ${errors.length - 5} more)` : '';
  return `${shown.join('; ')}${more}`;
}
