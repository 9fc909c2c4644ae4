/**
 * Why an eval could not score or run a case, as a caller can tell apart without reading the message:
 *
 * - `invalid_scorer`: a scorer's spec cannot be used — a pattern or expression that does not compile, a judge's model
 *   not among the pipeline's `models:`, a module's file not there (`makeScorers`; the message names the scorer).
 * - `not_replayable`: a case replayed that has no recording, or whose recording is of another pipeline.
 * - `incomplete_recording`: a case's recording lacks what its run needs — its `task.accepted` event, or a stored
 *   value its events refer to.
 * - `run_not_ended`: a run with no events, or whose task has no final event, so there is nothing to score.
 */
export type EvalsErrorCode = 'invalid_scorer' | 'not_replayable' | 'incomplete_recording' | 'run_not_ended';

/** A case that could not be run or scored, with a stable `code` and the underlying `cause`. */
export class EvalsError extends Error {
  override readonly name = 'EvalsError';
  readonly code: EvalsErrorCode;

  constructor(code: EvalsErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** Checked by shape, not class: each of the CLI's command bundles carries a copy of this class of its own. */
  static is(error: unknown, code?: EvalsErrorCode): error is EvalsError {
    return (
      error instanceof Error &&
      error.name === 'EvalsError' &&
      typeof (error as { code?: unknown }).code === 'string' &&
      (code === undefined || (error as { code?: unknown }).code === code)
    );
  }
}
