import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readFile, realpath, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  type WorkspaceChanges,
  type WorkspaceFile,
  WorkspaceManifest,
  workspaceDiff,
  workspaceObject,
  workspaceRef,
} from '@troupe/protocol';
import { z } from 'zod';
import type { ValueStore } from '../durable/valueStore.ts';
import type { Logger } from '../logging/index.ts';
import { locateInWorkspace } from '../tools/workspace.ts';
import { DEFAULT_WORKSPACE_LIMITS, type WorkspaceLimits } from './workspaceLimits.ts';
import { hashFile, readRegularFile, scanWorkspace } from './workspaceScan.ts';

/**
 * What a host remembers of a task's workspace, outside it: the manifest it last brought the workspace to
 * (`manifest`), and what its own steps changed since that no manifest has carried back yet (`own`, `ownRemoved`):
 * changes the workflow may not have taken yet (a sibling step at work, a reply lost to a stop), which no pull undoes.
 */
const SyncRecord = z.object({
  manifest: WorkspaceManifest,
  own: WorkspaceManifest.default({}),
  ownRemoved: z.array(z.string()).default([]),
});
type SyncRecord = z.infer<typeof SyncRecord>;

export interface WorkspaceSyncOptions {
  values: Pick<ValueStore, 'storeBytes' | 'readBytes'>;
  /** Task workspaces live under `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  limits?: WorkspaceLimits;
  logger?: Logger;
}

/**
 * Hands a task's workspace files between its steps, wherever each runs: before a step, {@link pull} brings the local
 * workspace to the manifest the step was sent (reading what it lacks from the pipeline's values bucket); after it,
 * {@link push} stores the files the step changed and gives the changes for its reply. Each file is stored as
 * `ws.<taskId>.<sha256>`, so identical content is kept once and a step run again writes the same objects.
 *
 * The host remembers, outside the workspace, the manifest it last brought each task's workspace to, and what the last
 * step it ran here changed. Only a file that came from one of those, unchanged since, is removed when a later
 * manifest drops it: anything else found in the workspace is left alone (and handed on by the next push, as the
 * step's own). A step sent again to this host (a stop, a restart) keeps what its own earlier run changed: the
 * manifest it is sent again with is from before that run, and its journal replays the calls that made the changes
 * without making them again.
 */
export class WorkspaceSync {
  readonly #values: Pick<ValueStore, 'storeBytes' | 'readBytes'>;
  readonly #root: string;
  readonly #limits: WorkspaceLimits;
  readonly #logger: Logger | undefined;
  /** One pull or push at a time per task on this host: parallel steps of a task share its workspace. */
  readonly #busy = new Map<string, Promise<unknown>>();

  constructor(options: WorkspaceSyncOptions) {
    this.#values = options.values;
    this.#root = options.workspaceRoot;
    this.#limits = options.limits ?? DEFAULT_WORKSPACE_LIMITS;
    this.#logger = options.logger;
  }

  /**
   * Brings the task's local workspace to `manifest`: each file missing or different is read from the values bucket
   * (checked against its SHA-256) and written in place; a file the last synced manifest had and this one lacks is
   * removed when it is unchanged. Without a manifest, nothing is done. Fails with the store's `ValueStoreError` when a
   * file cannot be read.
   */
  pull(pipeline: string, taskId: string, manifest: WorkspaceManifest | undefined): Promise<void> {
    // No manifest: no step has handed files on yet, or the workflow is from before workspaces were handed on. The
    // workspace is left as it is; removing what an earlier step left here would lose its files.
    if (manifest === undefined) return Promise.resolve();
    return this.#serially(`${pipeline}/${taskId}`, () => this.#pull(pipeline, taskId, manifest));
  }

  /**
   * Stores what the step changed in the task's workspace since `base` (the manifest it started from) and gives the
   * changes; undefined when the workspace does not exist and nothing was handed on. Fails `WorkspaceLimitError` past
   * a limit, or with the store's error.
   */
  push(
    pipeline: string,
    taskId: string,
    base: WorkspaceManifest | undefined,
  ): Promise<WorkspaceChanges | undefined> {
    return this.#serially(`${pipeline}/${taskId}`, () => this.#push(pipeline, taskId, base ?? {}));
  }

  async #pull(pipeline: string, taskId: string, manifest: WorkspaceManifest): Promise<void> {
    const dir = this.#workspace(pipeline, taskId);
    const record = await this.#synced(pipeline, taskId);
    if (Object.keys(manifest).length === 0 && record === undefined) return;
    const own = { ...record?.own };
    const ownRemoved = new Set(record?.ownRemoved);
    await mkdir(dir, { recursive: true });
    for (const [relative, file] of Object.entries(manifest)) {
      const target = await locateInWorkspace(dir, relative, { tool: 'workspace sync' });
      const local = target.exists ? await hashFile(target.path) : undefined;
      if (local?.sha256 === file.sha256 && local.bytes === file.bytes) {
        // The workflow has it now: no longer a change of this host's own.
        delete own[relative];
        ownRemoved.delete(relative);
        continue;
      }
      if (record !== undefined && changedHere(local, record, relative)) {
        this.#logger?.debug(
          { pipeline, taskId, path: relative },
          `workspace file ${relative} was changed here and not handed back yet; this copy is kept`,
        );
        continue;
      }
      const bytes = await this.#values.readBytes(workspaceRef(pipeline, taskId, file));
      await mkdir(path.dirname(target.path), { recursive: true });
      await writeAtomically(target.path, bytes);
      delete own[relative];
      ownRemoved.delete(relative);
    }
    for (const [relative, file] of Object.entries(record?.manifest ?? {})) {
      if (relative in manifest || relative in own) continue;
      const target = await locateInWorkspace(dir, relative, { tool: 'workspace sync' });
      if (!target.exists) continue;
      const local = await hashFile(target.path);
      // Changed here since it was synced: someone's own work, which a manifest never removes.
      if (local?.sha256 !== file.sha256) {
        this.#logger?.warn(
          { pipeline, taskId, path: relative },
          `workspace file ${relative} was removed by an earlier step elsewhere but changed here; it is kept`,
        );
        continue;
      }
      await rm(target.path, { force: true });
    }
    await this.#remember(pipeline, taskId, { manifest, own, ownRemoved: [...ownRemoved] });
  }

  async #push(
    pipeline: string,
    taskId: string,
    base: WorkspaceManifest,
  ): Promise<WorkspaceChanges | undefined> {
    const dir = this.#workspace(pipeline, taskId);
    let scan: Awaited<ReturnType<typeof scanWorkspace>>;
    try {
      scan = await scanWorkspace(dir, this.#limits);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      // No workspace here: the step made none, and whatever it was sent is still the task's.
      return Object.keys(base).length === 0 ? undefined : { files: {}, removed: [] };
    }
    if (scan.skipped.length > 0) {
      this.#logger?.warn(
        { pipeline, taskId, skipped: scan.skipped.slice(0, 20) },
        `${scan.skipped.length} workspace entries are not regular files (symlinks, FIFOs); they are not handed on to later steps`,
      );
    }
    if (scan.passedOver.length > 0) {
      this.#logger?.debug(
        { pipeline, taskId, passedOver: scan.passedOver.slice(0, 20) },
        `${scan.passedOver.length} dependency, cache or version-control directories are not handed on to later steps`,
      );
    }
    const changes = workspaceDiff(base, scan.files);
    const realDir = await realpath(dir);
    for (const relative of Object.keys(changes.files)) {
      const bytes = await readRegularFile(path.join(dir, ...relative.split('/')), realDir);
      // Gone since the scan (a temporary file of a build still at work here): handed on as gone, not as an error
      // that would send the step again and again.
      if (bytes === undefined) {
        delete changes.files[relative];
        if (relative in base) changes.removed.push(relative);
        continue;
      }
      // What is handed on is what was read and stored, even if the file changed since the scan.
      const file = { bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') };
      const name = workspaceObject(taskId, file.sha256);
      const ref = await this.#values.storeBytes(pipeline, name, bytes);
      if (ref.name !== name)
        throw new Error(`workspace file ${relative} was stored as ${ref.name}, not ${name}`);
      changes.files[relative] = file;
    }
    // The step's changes are this host's own until a manifest carries them back: no pull undoes them meanwhile.
    const record = await this.#synced(pipeline, taskId);
    const own = { ...record?.own, ...changes.files };
    for (const removed of changes.removed) delete own[removed];
    const ownRemoved = new Set(record?.ownRemoved);
    for (const removed of changes.removed) ownRemoved.add(removed);
    for (const written of Object.keys(changes.files)) ownRemoved.delete(written);
    await this.#remember(pipeline, taskId, {
      manifest: record?.manifest ?? base,
      own,
      ownRemoved: [...ownRemoved],
    });
    return changes;
  }

  #workspace(pipeline: string, taskId: string): string {
    return path.join(this.#root, pipeline, taskId);
  }

  /** Where the manifest last synced is kept: beside the task workspaces, out of every one (a task id has no dot). */
  #record(pipeline: string, taskId: string): string {
    return path.join(this.#root, pipeline, '.troupe-sync', `${taskId}.json`);
  }

  async #synced(pipeline: string, taskId: string): Promise<SyncRecord | undefined> {
    let text: string;
    try {
      text = await readFile(this.#record(pipeline, taskId), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
    const parsed = SyncRecord.safeParse(safeJson(text));
    // A record this host cannot read removes nothing: files are kept rather than lost.
    return parsed.success ? parsed.data : undefined;
  }

  async #remember(pipeline: string, taskId: string, synced: SyncRecord): Promise<void> {
    const record = this.#record(pipeline, taskId);
    await mkdir(path.dirname(record), { recursive: true });
    await writeAtomically(record, Buffer.from(JSON.stringify(synced)));
  }

  async #serially<T>(key: string, op: () => Promise<T>): Promise<T> {
    const before = this.#busy.get(key) ?? Promise.resolve();
    const mine = before.catch(() => {}).then(op);
    this.#busy.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.#busy.get(key) === mine) this.#busy.delete(key);
    }
  }
}

/**
 * Whether a file differs here from what this host last knew of it: written or removed by one of its own steps since
 * (and not carried back by a manifest yet), or changed by hand since the last pull.
 */
function changedHere(local: WorkspaceFile | undefined, record: SyncRecord, relative: string): boolean {
  if (record.ownRemoved.includes(relative)) return local === undefined;
  if (relative in record.own) return true;
  const known = record.manifest[relative];
  if (known === undefined) return false;
  return local === undefined || local.sha256 !== known.sha256;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A reader never sees half a file: the bytes land in a sibling temp file renamed over the target. */
async function writeAtomically(file: string, bytes: Uint8Array): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${randomUUID()}.tmp`);
  try {
    await writeFile(temp, bytes, { flag: 'wx' });
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}
