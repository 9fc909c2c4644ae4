import { HELP_DEFAULTS } from './helpDefaults.ts';

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** A repeat within this long is the same Ctrl-C delivered twice (`npx` passes it on to the child it also reached). */
const REPEAT_MS = 1_000;
/** Of a stop's time, what is kept back for the process to say what it left and exit: a tenth, at most this. */
const EXIT_MARGIN_MS = 1_000;

/** Exit code of a process whose stop did not finish in its time (1), as opposed to one stopped cleanly (0). */
export const STOP_TIMED_OUT_EXIT_CODE = 1;

/** The bound on a stop, in ms: `--stop-timeout` seconds, else the default (the coordinator's, see helpDefaults.ts). */
export function stopTimeoutMsOf(seconds: number | undefined): number {
  return Math.round((seconds ?? HELP_DEFAULTS.stopTimeoutSeconds) * 1000);
}

/** How long a stop may take, and what to say when it takes longer. */
export interface StopBound {
  /** Past this (ms) after the signal the process exits whatever it is doing, with {@link STOP_TIMED_OUT_EXIT_CODE}. */
  timeoutMs: number;
  /** What is still in hand when the time is up (`2 tasks (a, b) …`), for the last line it writes. */
  leftBehind?: () => string | undefined;
  /** Run just before that exit, synchronously: what must not outlive the process (an embedded nats-server). */
  beforeExit?: () => void;
}

/**
 * Resolves once the process was told to stop (Ctrl-C, SIGTERM, a closed terminal) and `stop` has finished; `stop` is
 * given the time it has (ms), a little less than the bound. Whatever `stop` or NATS does, the process has ended
 * `bound.timeoutMs` after the signal: past it, it says what it left behind and exits with
 * {@link STOP_TIMED_OUT_EXIT_CODE}. A second signal while stopping, after a moment, exits at once (130): the person
 * does not want to wait.
 */
export function untilStopped(
  stop: (timeoutMs: number) => Promise<void>,
  saying: string,
  bound: StopBound,
): Promise<void> {
  return new Promise((resolve) => {
    let stoppingSince: number | undefined;
    let finished = false;
    const onSignal = () => {
      if (stoppingSince !== undefined) {
        if (Date.now() - stoppingSince > REPEAT_MS) process.exit(130);
        return;
      }
      stoppingSince = Date.now();
      const seconds = bound.timeoutMs / 1000;
      process.stderr.write(`${saying} (at most ${seconds} s)\n`);
      // Not holding the process up: it fires only if something (a stop stuck on NATS, a connection left open)
      // still does when the time is up.
      setTimeout(() => {
        if (finished) process.exit(process.exitCode ?? 0);
        const left = bound.leftBehind?.();
        process.stderr.write(
          `troupe: the stop did not finish within ${seconds} s (--stop-timeout); exiting now` +
            `${left ? `, leaving ${left}` : ''}\n`,
        );
        bound.beforeExit?.();
        process.exit(STOP_TIMED_OUT_EXIT_CODE);
      }, bound.timeoutMs).unref();
      const ended = () => {
        finished = true;
        resolve();
      };
      stop(bound.timeoutMs - Math.min(EXIT_MARGIN_MS, bound.timeoutMs / 10)).then(ended, (error: unknown) => {
        process.stderr.write(`error while stopping: ${(error as Error).message}\n`);
        ended();
      });
    };
    for (const signal of SIGNALS) process.on(signal, onSignal);
  });
}
