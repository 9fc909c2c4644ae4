const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** A repeat within this long is the same Ctrl-C delivered twice (`npx` passes it on to the child it also reached). */
const REPEAT_MS = 1_000;

/**
 * Resolves once the process was told to stop (Ctrl-C, SIGTERM, a closed terminal) and `stop` has finished. A
 * second signal while stopping, after a moment, exits at once (130): the person does not want to wait.
 */
export function untilStopped(stop: () => Promise<void>, saying: string): Promise<void> {
  return new Promise((resolve) => {
    let stoppingSince: number | undefined;
    const onSignal = () => {
      if (stoppingSince !== undefined) {
        if (Date.now() - stoppingSince > REPEAT_MS) process.exit(130);
        return;
      }
      stoppingSince = Date.now();
      process.stderr.write(`${saying}\n`);
      stop().then(resolve, (error: unknown) => {
        process.stderr.write(`error while stopping: ${(error as Error).message}\n`);
        resolve();
      });
    };
    for (const signal of SIGNALS) process.on(signal, onSignal);
  });
}
