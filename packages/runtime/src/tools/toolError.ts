/** Stable reasons a tool call produced no result; callers and tests branch on these, never on messages. */
export type ToolErrorCode =
  | 'invalid_tool'
  | 'invalid_arguments'
  | 'unknown_tool'
  | 'not_declared'
  | 'denied'
  | 'approval_required'
  | 'timeout'
  | 'cancelled'
  | 'path_outside_workspace'
  | 'not_found'
  | 'too_large'
  | 'failed';

/**
 * An expected failure of a tool or of a tool call, with a stable `code` and a message a model or a person can act on.
 *
 * @example
 * throw new ToolError('path_outside_workspace', 'write_file refused: path ../etc/passwd is outside the workspace /srv/task-42');
 */
export class ToolError extends Error {
  override readonly name = 'ToolError';
  readonly code: ToolErrorCode;

  constructor(code: ToolErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
