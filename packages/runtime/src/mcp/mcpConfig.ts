import { z } from 'zod';

/** An MCP server's name in config; its tools are offered as `<name>.<tool>`. */
export const McpServerName = z
  .string()
  .regex(/^[a-z0-9-]+$/, 'an MCP server name is lower-case letters, digits and "-"');
export type McpServerName = z.infer<typeof McpServerName>;

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');

// Settings every transport shares.
const common = {
  /** Seconds one tool call (and the connect handshake) may take; 60 when absent. */
  timeout: z.number().positive().optional(),
  /** The server's tool names to expose; every tool when absent. */
  tools: z.array(z.string().min(1)).optional(),
};

/**
 * A local MCP server started as a child process and spoken to over stdin/stdout. The child gets `PATH`, `HOME`
 * and `LANG` from the coordinator and the `env` configured here; values may name a coordinator variable as `${VAR}`.
 */
export const McpStdioServerConfig = z.strictObject({
  transport: z.literal('stdio'),
  command: z.string().min(1),
  args: z.array(z.string()).optional(),
  env: z.record(envName, z.string()).optional(),
  cwd: z.string().min(1).optional(),
  ...common,
});
export type McpStdioServerConfig = z.infer<typeof McpStdioServerConfig>;

/** A remote MCP server spoken to over streamable HTTP; header values may name a coordinator variable as `${VAR}`. */
export const McpHttpServerConfig = z.strictObject({
  transport: z.literal('http'),
  url: z.url({ protocol: /^https?$/ }),
  headers: z.record(z.string().min(1), z.string()).optional(),
  ...common,
});
export type McpHttpServerConfig = z.infer<typeof McpHttpServerConfig>;

/**
 * How to reach one MCP server.
 *
 * @example
 * McpServerConfig.parse({ transport: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer ${TOKEN}' } });
 */
export const McpServerConfig = z.discriminatedUnion('transport', [McpStdioServerConfig, McpHttpServerConfig]);
export type McpServerConfig = z.infer<typeof McpServerConfig>;

/** MCP servers by name. */
export const McpServers = z.record(McpServerName, McpServerConfig);
export type McpServers = Record<string, McpServerConfig>;

/** Seconds a call may take when the config sets no `timeout`. */
export const DEFAULT_MCP_TIMEOUT_SECONDS = 60;
