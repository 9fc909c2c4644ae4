import { DatasetSummary, Name } from '@troupe/protocol';
import { z } from 'zod';

/** The most tasks one request adds: each is a few reads of the server, and its recording a share of the version. */
export const MAX_RUNS = 500;

/**
 * What `POST /v1/evals/datasets/{name}/cases` adds: the tasks named (`taskIds`, each whatever its status or age, of
 * `pipeline` alone when it is given), or a pipeline's ended tasks chosen as `troupe eval dataset add --from-runs`
 * chooses them (by `status`, `since` and `limit`, the newest first).
 */
export const AddRunsBody = z
  .object({
    /** These tasks, in this order. */
    taskIds: z.array(z.string().min(1).max(200)).min(1).max(MAX_RUNS).optional(),
    /** The pipeline whose ended tasks are taken; with `taskIds`, a task of another pipeline is skipped. */
    pipeline: Name.optional(),
    /** Only tasks that ended so (any ended task when absent). */
    status: z.enum(['completed', 'failed', 'cancelled']).optional(),
    /** Only tasks created at or after this time (ISO 8601). */
    since: z.iso.datetime({ offset: true }).optional(),
    /** At most this many tasks, the newest first (50 when absent). */
    limit: z.number().int().positive().max(MAX_RUNS).optional(),
    /** The dataset's description, for a new dataset or to replace the one it has. */
    description: z.string().max(2_000).optional(),
  })
  .strict()
  .meta({ id: 'AddRunsToDataset' });
export type AddRunsBody = z.infer<typeof AddRunsBody>;

/** A task that gave no case, and why. */
export const SkippedRun = z.object({ taskId: z.string(), why: z.string() });
export type SkippedRun = z.infer<typeof SkippedRun>;

/** The version stored: its summary, how many cases were added and replaced, and each task skipped with why. */
export const AddedRuns = z
  .object({
    dataset: DatasetSummary,
    /** The version it was made from; absent for a new dataset. */
    previousVersion: z.number().int().positive().optional(),
    added: z.number().int().nonnegative(),
    replaced: z.number().int().nonnegative(),
    skipped: z.array(SkippedRun),
  })
  .meta({ id: 'AddedRuns' });
export type AddedRuns = z.infer<typeof AddedRuns>;
