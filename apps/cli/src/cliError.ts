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
