import { redactSecrets } from '@troupe/runtime/secrets';
import { CliError, explain } from '../cliError.ts';

/** Runs a command and turns its outcome into an exit code; user errors print without a stack. */
export const commandAction =
  <A extends unknown[]>(command: (...args: A) => Promise<number>) =>
  async (...args: A) => {
    try {
      process.exitCode = await command(...args);
    } catch (thrown) {
      const error = plain(thrown);
      // Whatever the error quotes (a server's reply, a URL), no secret reaches the terminal.
      if (CliError.is(error)) {
        process.stderr.write(`troupe: ${redactSecrets(error.message)}\n`);
        process.exitCode = error.exitCode;
        return;
      }
      process.stderr.write(
        `troupe: ${redactSecrets(error instanceof Error ? (error.stack ?? error.message) : String(error))}\n`,
      );
      process.exitCode = 1;
    }
  };

/** An operation's refusal (an `OperationError` of @troupe/client) as a CliError, said as plainly; else the error. */
function plain(error: unknown): unknown {
  try {
    return explain(error);
  } catch (explained) {
    return explained;
  }
}
