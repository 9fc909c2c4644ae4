/** Stable reasons an MCP server could not be used. */
export type McpServerErrorCode = 'invalid_config' | 'missing_env' | 'start_failed';

/**
 * An MCP server that could not be configured or started, with a message naming the server and what to fix.
 *
 * @example
 * throw new McpServerError('start_failed', 'MCP server files (stdio: node x.js) failed to start: …', { server: 'files' });
 */
export class McpServerError extends Error {
  override readonly name = 'McpServerError';
  readonly code: McpServerErrorCode;
  /** The server's config name, when one server is at fault. */
  readonly server: string | undefined;

  constructor(code: McpServerErrorCode, message: string, options: { server?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.server = options.server;
  }
}
