import { Environment } from '@marcbachmann/cel-js';
import type { ScorerSpec } from '@troupe/protocol';
import { CEL_OPTIONS } from '../../config/expressions.ts';
import type { CaseRun } from '../evalTypes.ts';
import { type CelData, celScorerEnvironment } from './celEnvironment.ts';
import { type Check, parseJsonText } from './check.ts';
import { type PatternWorker, patternWorker } from './patternWorker.ts';
import { safetyCounts, stepFacts, toolsCalled } from './runFacts.ts';

/**
 * What a CEL scorer reads of a run. Counts are CEL ints, costs doubles; JSON numbers that are whole are ints, so
 * `json.items.size() == json.count` compares as written.
 * - `output`: the output text (`""` when there is none); `json`: the output parsed as JSON, or null;
 * - `status`: `completed`, `failed` or `cancelled`; `durationMs`;
 * - `usage`: `inputTokens`, `outputTokens`, `cachedTokens` (cache reads), `cacheWriteTokens`, `costUsd`, `modelCalls`;
 * - `steps.<id>`: `rounds`, `ok`, `verdict` (`approve`, `reject` or null), `output`, `durationMs`;
 * - `trajectory`: the tools called, in order; `tools.called(name)`: how many times one was called;
 * - `safety`: `denied`, `sandboxRefusals`, `approvalsAsked`;
 * - `case`: `id`, `goal`, `metadata`, `expected` (null when the case has none).
 */
const { environment } = celScorerEnvironment(Environment, CEL_OPTIONS);

/**
 * A CEL assertion over the run: true is 1 and false 0; a number from 0 to 1 is the value. It is parsed and its type
 * checked now, so a bad expression is refused at once; anything else it gives is an error score. It is evaluated on
 * the pattern thread ({@link PatternWorker}): `matches` with a pattern that backtracks catastrophically is stopped at
 * the scorer's time limit, and the event loop stays free meanwhile.
 */
export function celCheck(spec: Extract<ScorerSpec, { type: 'cel' }>): Check {
  try {
    environment.parse(spec.expr);
  } catch (error) {
    throw new Error(`not a valid CEL expression: ${firstLine(error)}`);
  }
  const checked = environment.check(spec.expr);
  if (!checked.valid) throw new Error(`not a valid CEL expression: ${firstLine(checked.error)}`);
  const type = checked.type ?? 'dyn';
  if (!['bool', 'int', 'uint', 'double', 'dyn'].includes(type)) {
    throw new Error(`gives a ${type}; a CEL scorer must give a bool, or a number from 0 to 1`);
  }
  return async (run, context) => {
    let result: unknown;
    try {
      result = await patternWorker.run({ kind: 'cel', expr: spec.expr, data: celScope(run) }, context.signal);
    } catch (error) {
      throw new Error(`${spec.expr}: ${firstLine(error)}`);
    }
    return finding(spec.expr, result);
  };
}

function finding(expr: string, result: unknown) {
  if (typeof result === 'boolean') return { value: result ? 1 : 0, reason: `${expr} is ${result}` };
  const value = typeof result === 'bigint' ? Number(result) : result;
  if (typeof value === 'number' && value >= 0 && value <= 1) return { value, reason: `${expr} is ${value}` };
  throw new Error(`${expr} gives ${shown(result)}, not a bool or a number from 0 to 1`);
}

/** The variables of a CEL scorer, for one run. */
export function celScope(run: CaseRun): CelData {
  const steps = Object.fromEntries(
    Object.entries(stepFacts(run)).map(([id, facts]) => [
      id,
      { ...facts, rounds: BigInt(facts.rounds), durationMs: int(facts.durationMs) },
    ]),
  );
  const safety = safetyCounts(run);
  const trajectory = toolsCalled(run);
  const parsed = run.output === undefined ? undefined : parseJsonText(run.output);
  return {
    output: run.output ?? '',
    json: parsed === undefined ? null : toCel(parsed.value),
    status: run.status,
    usage: {
      inputTokens: int(run.usage.inputTokens),
      outputTokens: int(run.usage.outputTokens),
      cachedTokens: int(run.usage.cachedTokens),
      cacheWriteTokens: int(run.usage.cacheWriteTokens ?? 0),
      costUsd: run.usage.costUsd,
      modelCalls: int(run.usage.modelCalls),
    },
    durationMs: int(run.durationMs),
    steps,
    trajectory,
    safety: {
      denied: int(safety.denied),
      sandboxRefusals: int(safety.sandboxRefusals),
      approvalsAsked: int(safety.approvalsAsked),
    },
    case: {
      id: run.case.id,
      goal: run.case.goal,
      metadata: run.case.metadata ?? {},
      expected: run.case.expected ?? null,
    },
  };
}

const int = (n: number) => BigInt(Math.round(n));

/** JSON as CEL reads it: whole numbers are ints. */
function toCel(value: unknown): unknown {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(toCel);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, toCel(item)]));
  }
  return value;
}

function shown(value: unknown): string {
  if (typeof value === 'bigint') return String(value);
  if (value instanceof Map) return 'a map';
  if (Array.isArray(value)) return 'a list';
  return JSON.stringify(value) ?? String(value);
}

const firstLine = (error: unknown) => String((error as Error).message ?? error).split('\n')[0];
