import type { Trace } from './timeline.ts';

/** The steps a restart may start from, in the order the task first ran them, and the one the chooser starts at. */
export interface RestartChoice {
  steps: string[];
  /** The step that failed (or was at work when the task was cancelled); the last step when none says so. */
  preset: string | undefined;
}

/**
 * The steps of a failed or cancelled task a restart can start from (a step of the flow by its id, each once), and the
 * step to offer first: the one its failure names, else the last that ended not ok, else the last still at work when
 * the task ended.
 */
export function restartChoice(trace: Trace): RestartChoice {
  const steps = [...new Set(trace.steps.map((s) => s.step))];
  const named = trace.failure?.step;
  const failed = trace.steps.findLast((s) => s.outcome && !s.outcome.ok)?.step;
  const cut = trace.steps.findLast((s) => !s.outcome)?.step;
  const preset = [named, failed, cut, steps.at(-1)].find((s) => s !== undefined && steps.includes(s));
  return { steps, preset };
}
