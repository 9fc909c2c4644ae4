export { resolvePlaceholders } from './envPlaceholders.ts';
export {
  DEFAULT_MCP_TIMEOUT_SECONDS,
  McpHttpServerConfig,
  McpServerConfig,
  McpServerName,
  McpServers,
  McpStdioServerConfig,
} from './mcpConfig.ts';
export { McpServerError, type McpServerErrorCode } from './mcpServerError.ts';
export { renderMcpToolResult } from './mcpToolResult.ts';
export {
  connectMcpServers,
  type McpConnections,
  type McpConnectOptions,
  type McpServerInfo,
} from './mcpToolSource.ts';
export { DEFAULT_RESTART_BACKOFF, type RestartBackoff } from './restartBackoff.ts';
