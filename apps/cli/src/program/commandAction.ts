import { redactSecrets } from '@troupe/runtime/secrets';
import { CliError } from '../cliError.ts';

/** Runs a command and turns its outcome into an exit code; user errors print without a stack. */
export const commandAction =
  <A extends unknown[]>(command: (...args: A) => Promise<number>) =>
  async (...args: A) => {
    try {
      process.exitCode = await command(...args);
    } catch (error) {
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
