// A real MCP server over stdio for tests: `node --import tsx packages/testkit/src/mcpStdioServer.ts [--crash]`.
// It offers `add` and `env`; with `--crash` it writes to stderr and exits before speaking MCP.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { type McpToolCall, registerAddTool } from './mcpServers.ts';

if (process.argv.includes('--crash')) {
  process.stderr.write('test MCP server crashed on purpose\n');
  process.exit(3);
}

const calls: McpToolCall[] = [];
const server = new McpServer({ name: 'troupe-test-stdio', version: '1.0.0' });
registerAddTool(server, calls);
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
await server.connect(new StdioServerTransport());
