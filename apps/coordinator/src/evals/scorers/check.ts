import type { LoadedPipeline } from '../../config/loadPipeline.ts';
import type { ImportModule } from '../../config/toolModules.ts';
import type { CaseRun, ScoreContext } from '../evalTypes.ts';

/** What a check finds of one run: a value from 0 to 1 and why; a judge's, what its model calls cost. */
export interface Finding {
  value: number;
  reason: string;
  costUsd?: number;
}

/** One scorer's check of a run, made from its spec; it throws when it cannot tell (the score is then an error). */
export type Check = (run: CaseRun, context: ScoreContext) => Finding | Promise<Finding>;

/** What a check is made with (`makeScorers`' options). */
export interface CheckOptions {
  /** Where a module scorer's path is read from. */
  baseDir: string;
  /** The pipeline the cases run on, when known now: a judge's model is checked against its `models:`. */
  pipeline?: LoadedPipeline;
  /** The runs scored are live tasks (a pipeline's `evals:` block), which have no expected output. */
  online?: boolean;
  /** Imports a module scorer, given its absolute path; Node's `import()` (JavaScript only) when absent. */
  importModule?: ImportModule;
}

/** A check that could not tell, after spending something (a judge whose reply could not be read). */
export class CheckError extends Error {
  override readonly name = 'CheckError';
  readonly costUsd: number;

  constructor(message: string, costUsd: number, options?: { cause?: unknown }) {
    super(message, options);
    this.costUsd = costUsd;
  }
}

/** Text in a reason: quoted, and cut when long. */
export function quoted(text: string, max = 120): string {
  const shown = text.length <= max ? text : `${text.slice(0, max)}…`;
  return JSON.stringify(shown);
}

/**
 * A model's or a task's JSON reply, parsed: the whole text, or the inside of a Markdown code fence around it (as
 * models like to send it). Undefined when it is not JSON.
 */
export function parseJsonText(text: string): { value: unknown } | undefined {
  const trimmed = text.trim();
  const fenced = /^```[a-zA-Z]*\s*\n?([\s\S]*?)\n?\s*```$/.exec(trimmed)?.[1];
  for (const candidate of fenced === undefined ? [trimmed] : [fenced, trimmed]) {
    try {
      return { value: JSON.parse(candidate) };
    } catch {
      // Not JSON as it is: the next form, if any.
    }
  }
  return undefined;
}
