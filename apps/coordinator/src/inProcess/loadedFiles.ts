import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { builtinTools } from '../config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../config/loadPipeline.ts';

interface Loaded {
  /** The file's modification time and size when it was read: a change to either loads it again. */
  stamp: string;
  pipeline: Promise<LoadedPipeline>;
}

const loaded = new Map<string, Loaded>();

/**
 * A pipeline file loaded as `troupe up` loads it (with the built-in tools), once per process while the file is
 * unchanged: runs of the same path share one loaded pipeline, and with it one compiled flow and agent host (see
 * `inProcessStack.ts`). A file that changed (its time or size) is loaded again; the files it refers to (scripts,
 * tool modules) are read at that load. A load that fails is not kept.
 */
export async function loadedFile(file: string): Promise<LoadedPipeline> {
  const path = resolve(file);
  // A file that cannot be read is left to loadPipeline, which says why.
  const stamp = await stat(path).then(
    (s) => `${s.mtimeMs}:${s.size}`,
    () => undefined,
  );
  const kept = loaded.get(path);
  if (stamp !== undefined && kept?.stamp === stamp) return kept.pipeline;
  const pipeline = loadPipeline(file, { toolNames: builtinTools().names() });
  if (stamp === undefined) return pipeline;
  const entry = { stamp, pipeline };
  loaded.set(path, entry);
  pipeline.catch(() => loaded.get(path) === entry && loaded.delete(path));
  return pipeline;
}
