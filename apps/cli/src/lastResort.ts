import type { Logger } from '@troupe/runtime';

/**
 * A service must not end because one promise somewhere was rejected with nobody to handle it (Node's default):
 * each such rejection is a bug, logged with its stack, and the service goes on serving its other tasks. Thrown
 * exceptions still end the process: after one, its state cannot be trusted.
 */
export function logUnhandledRejections(logger: Logger): void {
  process.on('unhandledRejection', (reason) => {
    logger.error(
      { err: reason },
      'a promise was rejected and nothing handled it (a bug); the process goes on',
    );
  });
}
