// A real MCP server over stdio for tests: `node --import tsx packages/testkit/src/mcpStdioServer.ts [options]`.
// It offers `add`, `env` and `exit`. With `--crash`, it writes to stderr and exits before speaking MCP; with
// `--crash-if <file>`, it does so only while that file exists (a server that keeps dying when restarted); with
// `--without-env-if <file>`, it leaves `env` out while that file exists (a server that lost a tool on restart).
import { existsSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { type McpToolCall, registerAddTool } from './mcpServers.ts';

/** Whether `--<flag> <file>` was given and that file exists. */
const fileFlag = (flag: string): boolean => {
  const at = process.argv.indexOf(flag);
  const file = at === -1 ? undefined : process.argv[at + 1];
  return file !== undefined && existsSync(file);
};

if (process.argv.includes('--crash') || fileFlag('--crash-if')) {
  process.stderr.write('test MCP server crashed on purpose\n');
  process.exit(3);
}

const calls: McpToolCall[] = [];
const server = new McpServer({ name: 'troupe-test-stdio', version: '1.0.0' });
registerAddTool(server, calls);
if (!fileFlag('--without-env-if')) {
  server.registerTool(
    'env',
    {
      description: "Return the value of one of this server's environment variables",
      inputSchema: { name: z.string().describe('Variable name') },
    },
    async ({ name }) => {
      const value = process.env[name];
      return { content: [{ type: 'text', text: value === undefined ? `${name} is not set` : value }] };
    },
  );
}
server.registerTool(
  'exit',
  {
    description: 'Make the server exit with this code while the call is running',
    inputSchema: { code: z.number().int().min(0).max(255).describe('Exit code') },
  },
  async ({ code }) => {
    process.stderr.write(`test MCP server exiting on purpose with code ${code}\n`);
    process.exit(code);
  },
);
await server.connect(new StdioServerTransport());
