import { z } from 'zod';
import { Name, TaskId } from '../names.ts';

/** The request and response shapes of a task's workspace files over HTTP: the source of their OpenAPI document. */

/** One file of a task's workspace. */
export const ListedWorkspaceFile = z
  .object({
    /** Relative to the workspace, `/`-separated: `GET /v1/tasks/{id}/files/{path}` serves it (each segment URL-encoded). */
    path: z.string(),
    bytes: z.number().int().nonnegative(),
    /** When it was last written, ISO 8601. */
    modified: z.string(),
    /** What `GET …/files/{path}` answers with, from the extension: `text/markdown; charset=utf-8`, `application/octet-stream`. */
    contentType: z.string(),
  })
  .meta({ id: 'WorkspaceFile' });
export type ListedWorkspaceFile = z.infer<typeof ListedWorkspaceFile>;

/** A task's workspace files, recursively, sorted by path. */
export const WorkspaceListing = z
  .object({
    taskId: TaskId,
    pipeline: Name,
    files: z.array(ListedWorkspaceFile),
    /**
     * Entries that are not listed as files: `symlink` (never followed by the listing; a link that stays inside the
     * workspace is still served by its path), `special_file` (a FIFO, socket or device), `tool_directory` (a
     * directory tools fill and make again — `node_modules`, `.git`, caches — listed once, not walked).
     */
    omitted: z.array(
      z.object({ path: z.string(), reason: z.enum(['symlink', 'special_file', 'tool_directory']) }),
    ),
    /** More files than a listing holds (10,000): `files` has the first ones by path. */
    truncated: z.boolean(),
    /** The cap on one file's size `GET …/files/{path}` serves, in bytes; a larger one is answered 413. */
    maxFileBytes: z.number().int().positive(),
  })
  .meta({ id: 'WorkspaceListing' });
export type WorkspaceListing = z.infer<typeof WorkspaceListing>;

export const FileParams = z.object({
  id: TaskId,
  /** The file's path in the workspace (what the route's wildcard matched). */
  '*': z.string().min(1).max(4_096),
});
export type FileParams = z.infer<typeof FileParams>;

export const FileQuery = z.object({
  /** `true`: served as an attachment (`Content-Disposition: attachment`), for a browser to save. */
  download: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});
export type FileQuery = z.infer<typeof FileQuery>;

/** A workspace file's bytes, as `GET /v1/tasks/{id}/files/{path}` serves them. */
export const WorkspaceFileBytes = z
  .unknown()
  .describe('the file’s bytes, with the content type of its extension');
export type WorkspaceFileBytes = z.infer<typeof WorkspaceFileBytes>;
