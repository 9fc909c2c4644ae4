/** Stable reasons a task's workspace file could not be listed or read; callers branch on these, never on messages. */
export type WorkspaceFileErrorCode = 'no_workspace' | 'path_outside_workspace' | 'not_found' | 'not_a_file';

/**
 * Why a file of a task's workspace was not given to a person or a client (`troupe files`, the gateway): the
 * workspace is not on this host, the path leads out of it, nothing is there, or what is there is not a file.
 *
 * @example
 * throw new WorkspaceFileError('path_outside_workspace', 'path ../etc/passwd is outside the workspace');
 */
export class WorkspaceFileError extends Error {
  override readonly name = 'WorkspaceFileError';
  readonly code: WorkspaceFileErrorCode;

  constructor(code: WorkspaceFileErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** Whether `error` is one, by shape (each CLI command is bundled apart, with a copy of this class of its own). */
  static is(error: unknown, code?: WorkspaceFileErrorCode): error is WorkspaceFileError {
    return (
      error instanceof Error &&
      error.name === 'WorkspaceFileError' &&
      (code === undefined || (error as { code?: unknown }).code === code)
    );
  }
}
