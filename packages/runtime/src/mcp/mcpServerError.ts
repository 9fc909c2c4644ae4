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

/**
 * What went wrong, with the causes, since `fetch failed` alone does not say that the connection was refused.
 *
 * @example
 * reasonOf(new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:9') }));
 * // 'fetch failed: connect ECONNREFUSED 127.0.0.1:9'
 */
export function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' && (error as NodeJS.ErrnoException).syscall?.startsWith('spawn')) {
    return `command not found (${error.message})`;
  }
  return error.cause instanceof Error ? `${error.message}: ${reasonOf(error.cause)}` : error.message;
}
