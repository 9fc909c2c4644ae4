/** Whether the timer of {@link withTimeout} may let the process exit while it waits. */
export interface WithTimeoutOptions {
  unref?: boolean;
}

/**
 * What `work` resolves with, or `'timeout'` if `ms` pass first; a rejection of `work` is passed on. The timer is
 * cleared as soon as the work settles, so a wait that ends early leaves none pending.
 *
 * @example
 * if ((await withTimeout(handlersDone, 5_000)) === 'timeout') logger.warn('handlers still running');
 */
export async function withTimeout<T>(
  work: Promise<T>,
  ms: number,
  options: WithTimeoutOptions = {},
): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), ms);
    if (options.unref) timer.unref();
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
