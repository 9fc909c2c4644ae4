import type { ScorerSpec } from '@troupe/protocol';
import type { Check } from './check.ts';
import { stepsRun, toolsCalled } from './runFacts.ts';

type Spec = Extract<ScorerSpec, { type: 'trajectory' }>;

/**
 * The tools a run called (or, with `of: steps`, the steps it ran) against a reference list, as LangSmith matches
 * trajectories: `strict`, the same list; `unordered`, the same items as many times each in any order; `subset`, nothing
 * called outside the reference; `superset`, everything in the reference called. 1 when it matches, else 0.
 */
export function trajectoryCheck(spec: Spec): Check {
  const what = spec.of === 'steps' ? 'steps run' : 'tools called';
  return (run) => {
    const actual = spec.of === 'steps' ? stepsRun(run) : toolsCalled(run);
    const difference = MATCHERS[spec.match](actual, spec.expected);
    const shown = `the ${what} ${listed(actual)}`;
    if (difference === undefined) {
      return { value: 1, reason: `${shown} match ${listed(spec.expected)} (${spec.match})` };
    }
    return {
      value: 0,
      reason: `${shown} do not match ${listed(spec.expected)} (${spec.match}): ${difference}`,
    };
  };
}

/** What differs between the run's list and the reference, or undefined when they match. */
type Matcher = (actual: readonly string[], expected: readonly string[]) => string | undefined;

const MATCHERS: Record<Spec['match'], Matcher> = {
  strict: (actual, expected) => {
    const at = firstDifference(actual, expected);
    if (at === undefined) return undefined;
    const got = actual[at] ?? 'nothing';
    const wanted = expected[at] ?? 'nothing';
    return `at ${at + 1}, ${got} where the reference has ${wanted}`;
  },
  unordered: (actual, expected) => {
    const missing = minus(expected, actual);
    const extra = minus(actual, expected);
    const parts = [
      ...(missing.length > 0 ? [`missing ${missing.join(', ')}`] : []),
      ...(extra.length > 0 ? [`extra ${extra.join(', ')}`] : []),
    ];
    return parts.length === 0 ? undefined : parts.join('; ');
  },
  subset: (actual, expected) => {
    const outside = [...new Set(actual.filter((item) => !expected.includes(item)))];
    return outside.length === 0 ? undefined : `outside the reference: ${outside.join(', ')}`;
  },
  superset: (actual, expected) => {
    const never = [...new Set(expected.filter((item) => !actual.includes(item)))];
    return never.length === 0 ? undefined : `never: ${never.join(', ')}`;
  },
};

function firstDifference(a: readonly string[], b: readonly string[]): number | undefined {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return undefined;
}

/** `from` with each item of `take` taken out once (a multiset difference), in `from`'s order. */
function minus(from: readonly string[], take: readonly string[]): string[] {
  const left = [...take];
  return from.filter((item) => {
    const at = left.indexOf(item);
    if (at === -1) return true;
    left.splice(at, 1);
    return false;
  });
}

const listed = (items: readonly string[]) => `[${items.join(', ')}]`;
