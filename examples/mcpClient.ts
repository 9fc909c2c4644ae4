/**
 * Run a Troupe pipeline as an MCP tool with the official MCP client (@modelcontextprotocol/client), over the
 * gateway's streamable HTTP endpoint: print its progress, ask the person at the terminal when the task needs an
 * approval or an answer, and print its output.
 *
 *   troupe up examples/demo.yaml --gateway 8080 --gateway-tokens troupe-tokens.yaml     # in one terminal
 *   TROUPE_TOKEN=trp_… npx tsx examples/mcpClient.ts http://127.0.0.1:8080/mcp demo "Write a short hello note"
 */
import { createInterface } from 'node:readline/promises';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url = 'http://127.0.0.1:8080/mcp', pipeline = 'demo', goal = 'Write a short hello note'] =
  process.argv.slice(2);

// `elicitation`: Troupe asks for approvals and answers through it. `auto`: MCP 2026-07-28 when the server offers it.
const client = new Client(
  { name: 'troupe-example', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: 'auto' } },
);
client.setRequestHandler('elicitation/create', async (request) => {
  const params = request.params as { message: string; requestedSchema?: { properties?: object } };
  // Nobody at a terminal to ask: say no (an approval is denied, a question stays open for `troupe answer`).
  if (!process.stdin.isTTY) return { action: 'decline' };
  const terminal = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const fields = Object.keys(params.requestedSchema?.properties ?? {});
    const reply = await terminal.question(
      `${params.message}\n${fields.join(', ')} (JSON, empty to decline): `,
    );
    return reply.trim() === '' ? { action: 'decline' } : { action: 'accept', content: JSON.parse(reply) };
  } finally {
    terminal.close();
  }
});

await client.connect(
  new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.TROUPE_TOKEN ?? ''}` } },
  }),
);
console.log(`tools: ${(await client.listTools()).tools.map((t) => t.name).join(', ')}`);
const result = await client.callTool(
  { name: pipeline, arguments: { goal } },
  // A pipeline may take minutes: each progress notification restarts the client's 60 s timeout.
  { onprogress: (p) => console.log(`progress: ${p.message}`), resetTimeoutOnProgress: true },
);
for (const part of result.content) if (part.type === 'text') console.log(part.text);
if (result.structuredContent) console.log(`structured: ${JSON.stringify(result.structuredContent)}`);
await client.close();
process.exitCode = result.isError ? 1 : 0;
