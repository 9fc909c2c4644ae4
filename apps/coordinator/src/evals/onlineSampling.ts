import { createHash } from 'node:crypto';

/**
 * Whether online scoring scores the task `taskId` at the sample rate `rate` (0 to 1): decided by a hash of the id
 * alone, so every coordinator, and one restarted or taking the task over, decides the same, and a rate of 0.1 scores
 * about one task in ten. The id's SHA-256 read as a fraction of 2^48 is compared with the rate: 1 scores every task,
 * 0 none.
 */
export function sampled(taskId: string, rate: number): boolean {
  if (rate >= 1) return true;
  if (rate <= 0) return false;
  return sampleFraction(taskId) < rate;
}

/** Where the task's id falls in [0, 1): its SHA-256's first 6 bytes over 2^48. */
export function sampleFraction(taskId: string): number {
  return createHash('sha256').update(taskId).digest().readUIntBE(0, 6) / 2 ** 48;
}
