import { createHash } from 'node:crypto';
import { SCORER_TIMEOUT_MS } from './scoreCase.ts';

/**
 * What a watcher of a task adds to its scorers' time limit when it waits for the task's `eval.scored`: the rereads of a
 * run that looks cut short (2 s), the wait for a scoring slot and the publishing.
 */
export const SCORE_WAIT_MARGIN_MS = 10_000;

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

/**
 * How long after task `taskId` ends its `eval.scored` may take to come, at most, by the `evals:` block of the version
 * it ran on: its slowest scorer's time limit (they score at once) and {@link SCORE_WAIT_MARGIN_MS}. Undefined when
 * there is no block or its sample leaves the task out: no score will come. `troupe tail --task` and `submit --wait`
 * wait this long after the final event.
 */
export function scoreWaitMs(
  evals: { sample: number; scorers: readonly { timeoutMs?: number | undefined }[] } | undefined,
  taskId: string,
): number | undefined {
  if (!evals || !sampled(taskId, evals.sample)) return undefined;
  const slowest = Math.max(...evals.scorers.map((scorer) => scorer.timeoutMs ?? SCORER_TIMEOUT_MS));
  return slowest + SCORE_WAIT_MARGIN_MS;
}
