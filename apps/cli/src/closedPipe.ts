/**
 * Ends the process quietly (exit code 0) when whoever reads stdout stops reading, as `troupe logs t-1 | head`
 * does, instead of dying on EPIPE with a stack trace.
 */
export function exitWhenStdoutCloses(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(0);
  });
}
