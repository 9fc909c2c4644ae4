import type { StepErrorCode } from '@troupe/protocol';

/** Stable codes of what cuts an agent step short; each is the step code its reply gives for the same failure. */
export type AgentStepErrorCode = Extract<
  StepErrorCode,
  'journal_unavailable' | 'budget_exceeded' | 'aborted'
>;

/**
 * The name an error of each code goes by. What waits on a person tells why its step stopped by name (a
 * `BudgetExceeded`; a step out of its own time is a `StepTimedOutError`, named `TimeoutError`), so these names are
 * part of the contract.
 */
const NAMES: Record<AgentStepErrorCode, string> = {
  journal_unavailable: 'JournalUnavailable',
  budget_exceeded: 'BudgetExceeded',
  aborted: 'StepStopped',
};

/**
 * What cut an agent step short, with a stable `code` and the underlying `cause`: thrown by what the step runs
 * (a journal out of reach), or given as the abort reason of what waits on a person when the step stops.
 *
 * @example
 * throw new AgentStepError('journal_unavailable', 'the step journal cannot be reached: timeout', { cause });
 */
export class AgentStepError extends Error {
  override readonly name: string;
  readonly code: AgentStepErrorCode;

  constructor(code: AgentStepErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = NAMES[code];
  }

  /** True when `error` is an AgentStepError, and of `code` when one is given. */
  static is(error: unknown, code?: AgentStepErrorCode): error is AgentStepError {
    return error instanceof AgentStepError && (code === undefined || error.code === code);
  }
}
