import { Environment } from '@marcbachmann/cel-js';

/** How conditions are parsed, here and where the loader checks their types (`conditionTypes.ts`). */
export const CEL_OPTIONS = {
  enableOptionalTypes: true,
  homogeneousAggregateLiterals: false,
  limits: { maxAstNodes: 500, maxDepth: 32, maxListElements: 100, maxMapEntries: 100, maxCallArguments: 8 },
};

/**
 * Conditions in pipeline files (`when:`, a route's `on:`) are CEL, the Common Expression Language of Kubernetes
 * admission policies and Envoy: not Turing-complete, no `eval`, no access to the process — an expression sees only
 * the variables below, and its size and depth are bounded when it is parsed.
 *
 * - `input`: the task's input (`{}` when it has none);
 * - `steps.<id>.output`: what an earlier step produced — parsed JSON when its output is JSON (an agent with an
 *   `outputSchema`), else the text; a step that has not run (skipped, or on another branch) is absent;
 *   `steps.<id>.error`: why a step failed, when its `onError` let the flow go on;
 * - `task`: `id`, `goal`, `pipeline`, `metadata` and `round`.
 */
const environment = new Environment(CEL_OPTIONS)
  .registerVariable('input', 'map')
  .registerVariable('steps', 'map')
  .registerVariable('task', 'map');

/** What an expression is evaluated over. */
export interface ExpressionScope {
  input: Record<string, unknown>;
  steps: Record<string, { output: unknown; error?: string }>;
  task: { id: string; goal: string; pipeline: string; metadata: Record<string, string>; round: number };
}

export type Evaluation = { ok: true; value: unknown } | { ok: false; message: string };

const parsed = new Map<string, ReturnType<typeof environment.parse>>();

/**
 * Why `expression` cannot be used — it does not parse, names a variable other than `input`, `steps` and `task`, or
 * mixes types (`"a" + 1`) — or undefined when it can. `type`: what it must give, when that can be told now.
 */
export function expressionProblem(expression: string, type?: 'bool' | 'list'): string | undefined {
  let checked: ReturnType<typeof environment.check>;
  try {
    checked = environment.check(expression);
  } catch (error) {
    return `not a valid CEL expression: ${firstLine(error)}`;
  }
  if (!checked.valid) {
    // `steps.fix-b.output` reads as `steps.fix - b.output`: a step id with "-" is selected with brackets.
    const dashed = expression.match(/\bsteps\s*\.\s*([a-z0-9_]+-[a-z0-9_-]+)/);
    const hint = dashed ? `; a step id with "-" is read as steps["${dashed[1]}"]` : '';
    return `not a valid CEL expression: ${firstLine(checked.error)}${hint}`;
  }
  const given = checked.type ?? 'dyn';
  if (type !== undefined && given !== 'dyn' && !given.startsWith(type)) {
    return `must give a ${type}, but gives a ${given}`;
  }
  return undefined;
}

/** The step ids an expression reads as `steps.<id>` or `steps["<id>"]`, to check them against the flow. */
export function stepsReadBy(expression: string): string[] {
  const bracketed = [...expression.matchAll(/\bsteps\s*\[\s*["']([^"']+)["']\s*\]/g)].map(
    (m) => m[1] as string,
  );
  const dotted = [...expression.matchAll(/\bsteps\s*\.\s*([a-z0-9_]+)/g)].map((m) => m[1] as string);
  return [...new Set([...dotted, ...bracketed])];
}

/** Evaluates `expression` over `scope`; an error (a missing key, a type mismatch) is a value, never thrown. */
export function evaluate(expression: string, scope: ExpressionScope): Evaluation {
  try {
    return { ok: true, value: fromCel(compiled(expression)(scope as never)) };
  } catch (error) {
    return { ok: false, message: `${expression}: ${firstLine(error)}` };
  }
}

function compiled(expression: string) {
  let program = parsed.get(expression);
  if (!program) {
    program = environment.parse(expression);
    parsed.set(expression, program);
  }
  return program;
}

/** CEL integers are bigints; what a flow compares and routes on is JSON, so they come back as numbers. */
function fromCel(value: unknown): unknown {
  if (typeof value === 'bigint') return Number(value);
  if (Array.isArray(value)) return value.map(fromCel);
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [String(k), fromCel(v)]));
  return value;
}

const firstLine = (error: unknown) => String((error as Error).message ?? error).split('\n')[0];
