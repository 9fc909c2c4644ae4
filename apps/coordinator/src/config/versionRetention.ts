import type { Logger } from '@troupe/runtime';
import type { PipelineVersions } from './pipelineVersions.ts';

/** How long a stored version is kept at least, used or not: a week, as `EVENTS` keeps a task's history. */
export const VERSION_RETENTION_MS = 7 * 24 * 60 * 60 * 1_000;

/** Hashes of versions, by pipeline. */
export type VersionsByPipeline = ReadonlyMap<string, ReadonlySet<string>>;

export interface VersionPruning {
  versions: PipelineVersions;
  /** The pipelines to prune, each with the versions kept whatever else holds (this coordinator's own). */
  keep: VersionsByPipeline;
  /**
   * The versions still needed, by pipeline: the newest the registry names, and those unfinished tasks run on. Asked
   * once for every pipeline, and only when some version is old enough to go, since it reads every task's record.
   */
  inUse: () => Promise<VersionsByPipeline>;
  now: number;
  retentionMs?: number;
  logger: Logger;
}

/**
 * Removes the stored versions of the pipelines that nothing needs any more: not kept (this coordinator's, the
 * newest), stored longer ago than the retention, and the version of no unfinished task. A task that starts later
 * starts on the newest, which is kept, so none can come to need a version removed here. Returns the hashes removed,
 * by pipeline.
 */
export async function pruneVersions(options: VersionPruning): Promise<Map<string, string[]>> {
  const { versions, keep, now, logger } = options;
  const retentionMs = options.retentionMs ?? VERSION_RETENTION_MS;
  const candidates = new Map<string, string[]>();
  for (const [pipeline, kept] of keep) {
    for (const hash of await versions.hashes(pipeline)) {
      if (kept.has(hash)) continue;
      const version = await versions.get(pipeline, hash);
      if (version && now - Date.parse(version.storedAt) > retentionMs) {
        candidates.set(pipeline, [...(candidates.get(pipeline) ?? []), hash]);
      }
    }
  }
  const removed = new Map<string, string[]>();
  if (candidates.size === 0) return removed;
  const used = await options.inUse();
  for (const [pipeline, hashes] of candidates) {
    const unused = hashes.filter((hash) => !used.get(pipeline)?.has(hash));
    for (const hash of unused) await versions.remove(pipeline, hash);
    if (unused.length === 0) continue;
    removed.set(pipeline, unused);
    logger.info(
      { pipeline, removed: unused },
      `removed ${unused.length} stored version(s) of pipeline ${pipeline} that no unfinished task uses`,
    );
  }
  return removed;
}
