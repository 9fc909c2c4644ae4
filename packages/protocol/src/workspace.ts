import { z } from 'zod';
import { TaskId } from './names.ts';
import { type ValueRef, valueBucket } from './valueRef.ts';

/**
 * A path of a task's workspace as a manifest names it: relative, `/`-separated, with no empty, `.` or `..` segment
 * and no NUL, so that no manifest (a forged one included) can name a place outside the workspace.
 */
export const WorkspacePath = z
  .string()
  .min(1)
  .max(1_024)
  .refine(
    (p) =>
      !p.includes('\0') &&
      p.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..'),
    'must be a relative path inside the workspace: "/"-separated, no empty, "." or ".." segment, no NUL',
  );

/**
 * One file of a workspace: its size and SHA-256. Its content is the object {@link workspaceObject} names in the
 * pipeline's values bucket, so the bucket and name are not repeated in every entry of every message.
 */
export const WorkspaceFile = z.strictObject({
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /**
   * The task that stored the content, when it is not the manifest's own: a file a restart or fork carried from its
   * origin is read from the origin's object, not copied.
   */
  task: TaskId.optional(),
});
export type WorkspaceFile = z.infer<typeof WorkspaceFile>;

/** Most files a manifest may name: it rides whole in step messages and in the task's checkpoint. */
export const MAX_WORKSPACE_FILES = 2_000;

/** The files of a task's workspace that earlier steps handed on, by path. */
export const WorkspaceManifest = z
  .record(WorkspacePath, WorkspaceFile)
  .refine(
    (m) => Object.keys(m).length <= MAX_WORKSPACE_FILES,
    `names more than ${MAX_WORKSPACE_FILES} files`,
  );
export type WorkspaceManifest = z.infer<typeof WorkspaceManifest>;

/** What a step changed in its task's workspace: files written (new or different), and files removed. */
export const WorkspaceChanges = z.strictObject({
  files: WorkspaceManifest,
  removed: z.array(WorkspacePath).max(MAX_WORKSPACE_FILES),
});
export type WorkspaceChanges = z.infer<typeof WorkspaceChanges>;

/**
 * The object that holds a workspace file's content: named by task and content, so identical content is stored once
 * per task and a step run again writes the same names.
 */
export function workspaceObject(taskId: string, sha256: string): string {
  return `ws.${taskId}.${sha256}`;
}

/**
 * The reference to a manifest entry's content in the pipeline's values bucket: the object of the task that stored it
 * (`file.task`, else `taskId`, the task whose manifest it is).
 */
export function workspaceRef(pipeline: string, taskId: string, file: WorkspaceFile): ValueRef {
  const { task, bytes, sha256 } = file;
  return { bucket: valueBucket(pipeline), name: workspaceObject(task ?? taskId, sha256), bytes, sha256 };
}

/**
 * A manifest as a restart or fork of its task carries it: each entry names the task whose object holds its content
 * (the origin's own files, `originTaskId`; files the origin carried from its own origin keep theirs), so no byte is
 * copied.
 */
export function carriedManifest(manifest: WorkspaceManifest, originTaskId: string): WorkspaceManifest {
  return Object.fromEntries(
    Object.entries(manifest).map(([path, file]) => [path, { ...file, task: file.task ?? originTaskId }]),
  );
}

/**
 * `base` with `changes` applied: written files replace what the path held, removed ones go. Applying the changes of
 * steps in the order they ended merges parallel steps' work, the last to end winning a path both wrote.
 */
export function applyWorkspaceChanges(
  base: WorkspaceManifest | undefined,
  changes: WorkspaceChanges,
): WorkspaceManifest {
  const next: WorkspaceManifest = { ...base };
  for (const removed of changes.removed) delete next[removed];
  for (const [path, file] of Object.entries(changes.files)) next[path] = file;
  return next;
}

/** What turns `base` into `now`: the files new or different in `now`, and those `now` lacks. */
export function workspaceDiff(base: WorkspaceManifest | undefined, now: WorkspaceManifest): WorkspaceChanges {
  const files: WorkspaceManifest = {};
  for (const [path, file] of Object.entries(now)) {
    const before = base?.[path];
    if (before?.sha256 !== file.sha256 || before.bytes !== file.bytes) files[path] = file;
  }
  const removed = Object.keys(base ?? {}).filter((path) => !(path in now));
  return { files, removed };
}

/** Whether the changes change nothing. */
export const noWorkspaceChanges = (changes: WorkspaceChanges): boolean =>
  changes.removed.length === 0 && Object.keys(changes.files).length === 0;
