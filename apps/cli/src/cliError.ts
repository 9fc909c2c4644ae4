/** Thrown for a user's mistake: printed as is, without a stack. */
export class CliError extends Error {
  override readonly name = 'CliError';
  readonly exitCode: number;

  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }

  /**
   * Whether `error` is a CliError. Checked by shape, not class: each command is bundled apart (see
   * scripts/buildCli.mjs), so the one that throws has a copy of this class of its own.
   */
  static is(error: unknown): error is CliError {
    return (
      error instanceof Error &&
      error.name === 'CliError' &&
      typeof (error as { exitCode?: unknown }).exitCode === 'number'
    );
  }
}

/**
 * For `.catch(explain)`: an operation's refusal (`OperationError` of @troupe/client: no such task, a
 * conflict, no coordinator) becomes a CliError with its message; anything else is thrown on as it is.
 */
export function explain(error: unknown): never {
  if (
    error instanceof Error &&
    error.name === 'OperationError' &&
    typeof (error as { code?: unknown }).code === 'string'
  ) {
    throw new CliError(error.message);
  }
  throw error;
}
