import type { ScorerSpec } from '@troupe/protocol';
import type { CaseRun } from '../evalTypes.ts';
import { type Check, type CheckOptions, type Finding, quoted } from './check.ts';
import { type PatternWorker, patternWorker } from './patternWorker.ts';

type Spec<T extends ScorerSpec['type']> = Extract<ScorerSpec, { type: T }>;

/** The output is exactly the spec's value, or the case's expected output when the spec has none. */
export function exactCheck(spec: Spec<'exact'>, options: CheckOptions): Check {
  if (spec.value === undefined && options.online) {
    throw new Error(
      'has no value, and live tasks have no expected output to compare with: give it a `value`',
    );
  }
  const fold = folding(spec.ignoreCase);
  return (run) => {
    const wanted = spec.value ?? run.case.expected;
    if (wanted === undefined) {
      throw new Error(
        `nothing to compare with: the scorer has no value and case ${run.case.id} no expected output`,
      );
    }
    const output = outputOf(run);
    if (typeof output !== 'string') return output;
    if (fold(output) === fold(wanted.trim())) return { value: 1, reason: 'the output is the expected text' };
    return { value: 0, reason: `the output ${quoted(output)} is not ${quoted(wanted.trim())}` };
  };
}

/** The output contains each of the spec's values; the value is the share of them it contains. */
export function containsCheck(spec: Spec<'contains'>): Check {
  const wanted = typeof spec.value === 'string' ? [spec.value] : spec.value;
  const fold = folding(spec.ignoreCase);
  return (run) => {
    const output = outputOf(run);
    if (typeof output !== 'string') return output;
    const missing = wanted.filter((value) => !fold(output).includes(fold(value)));
    const value = (wanted.length - missing.length) / wanted.length;
    if (missing.length === 0) return { value, reason: `the output contains ${list(wanted)}` };
    return { value, reason: `the output lacks ${list(missing)}: ${quoted(output)}` };
  };
}

/**
 * The output matches the spec's regular expression; it is compiled now, so a bad one is refused at once. It is matched
 * on the pattern thread ({@link PatternWorker}): a pattern that backtracks catastrophically on the output is stopped at
 * the scorer's time limit, and the event loop stays free meanwhile.
 */
export function regexCheck(spec: Spec<'regex'>): Check {
  let pattern: RegExp;
  try {
    pattern = new RegExp(spec.pattern, spec.flags);
  } catch (error) {
    throw new Error(`not a valid regular expression: ${(error as Error).message}`);
  }
  return async (run, context) => {
    const output = outputOf(run);
    if (typeof output !== 'string') return output;
    const job = { kind: 'regex' as const, pattern: spec.pattern, text: output };
    const matched = await patternWorker.run(
      spec.flags === undefined ? job : { ...job, flags: spec.flags },
      context.signal,
    );
    if (matched === true) return { value: 1, reason: `the output matches ${pattern}` };
    return { value: 0, reason: `the output does not match ${pattern}: ${quoted(output)}` };
  };
}

/** The trimmed output, or the finding of a run that has none (it did not complete). */
export function outputOf(run: CaseRun): string | Finding {
  if (run.output === undefined) return { value: 0, reason: `no output: the task ${run.status}` };
  return run.output.trim();
}

const folding =
  (ignoreCase: boolean | undefined) =>
  (text: string): string =>
    ignoreCase ? text.toLocaleLowerCase() : text;

const list = (values: readonly string[]) => values.map((value) => quoted(value, 60)).join(', ');
