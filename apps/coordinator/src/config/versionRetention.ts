import type { Logger } from '@troupe/runtime';
import type { PipelineVersions } from './pipelineVersions.ts';

/** How long a stored version is kept at least, used or not: a week, as `EVENTS` keeps a task's history. */
export const VERSION_RETENTION_MS = 7 * 24 * 60 * 60 * 1_000;

export interface VersionPruning {
  versions: PipelineVersions;
  pipeline: string;
  /** Versions kept whatever else holds: this coordinator's own, and the newest the registry names. */
  keep: ReadonlySet<string>;
  /** The versions the pipeline's unfinished tasks run on, read from their records after the candidates are known. */
  inUse: () => Promise<ReadonlySet<string>>;
  now: number;
  retentionMs?: number;
  logger: Logger;
}

/**
 * Removes the stored versions of a pipeline that nothing needs any more: not kept (this coordinator's, the newest),
 * stored longer ago than the retention, and the version of no unfinished task. A task that starts later starts on
 * the newest, which is kept, so none can come to need a version removed here. Returns the hashes removed.
 */
export async function pruneVersions(options: VersionPruning): Promise<string[]> {
  const { versions, pipeline, keep, now, logger } = options;
  const retentionMs = options.retentionMs ?? VERSION_RETENTION_MS;
  const candidates: string[] = [];
  for (const hash of await versions.hashes(pipeline)) {
    if (keep.has(hash)) continue;
    const version = await versions.get(pipeline, hash);
    if (version && now - Date.parse(version.storedAt) > retentionMs) candidates.push(hash);
  }
  if (candidates.length === 0) return [];
  const used = await options.inUse();
  const unused = candidates.filter((hash) => !used.has(hash));
  for (const hash of unused) await versions.remove(pipeline, hash);
  if (unused.length > 0) {
    logger.info(
      { pipeline, removed: unused },
      `removed ${unused.length} stored version(s) of pipeline ${pipeline} that no unfinished task uses`,
    );
  }
  return unused;
}
