/** Stable reasons a tool call produced no result; callers and tests branch on these, never on messages. */
export const TOOL_ERROR_CODES = [
  'invalid_tool',
  'invalid_arguments',
  'unknown_tool',
  'not_declared',
  'denied',
  'approval_required',
  'timeout',
  'cancelled',
  'path_outside_workspace',
  'not_found',
  'too_large',
  'failed',
  /** The call was not made on purpose: an eval's model mode runs no tool with effects off the recording. */
  'not_run',
] as const;
export type ToolErrorCode = (typeof TOOL_ERROR_CODES)[number];

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

  /**
   * True for a ToolError of any copy of this package: a tool module loaded by `troupe up` imports
   * `@troupe/runtime` from its own node_modules, whose class is not this one, so it is known by name and code.
   */
  static is(error: unknown): error is ToolError {
    if (error instanceof ToolError) return true;
    if (!(error instanceof Error) || error.name !== 'ToolError') return false;
    const { code } = error as { code?: unknown };
    return typeof code === 'string' && (TOOL_ERROR_CODES as readonly string[]).includes(code);
  }
}
