import { InMemoryTransport, McpServer } from '@modelcontextprotocol/server';
import type { PipelineRegistration } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import type { PipelineCallContext } from '../src/mcp/pipelineCall.ts';
import { PipelineTools } from '../src/mcp/pipelineTools.ts';

const registration = (name: string, input?: Record<string, unknown>): PipelineRegistration =>
  ({
    name,
    agents: ['worker'],
    steps: ['work'],
    ...(input ? { input } : {}),
    host: 'test',
    registeredAt: new Date(0).toISOString(),
  }) as PipelineRegistration;

/** The tool names a 2025-11-25 client of `server` is given, over an in-memory pair. */
async function listedTools(server: McpServer): Promise<string[]> {
  const [client, served] = InMemoryTransport.createLinkedPair();
  const replies = new Map<number, unknown>();
  client.onmessage = (message) => {
    if ('id' in message && 'result' in message) replies.set(message.id as number, message.result);
  };
  await server.connect(served);
  await client.start();
  await client.send({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'probe', version: '1' } },
  });
  await client.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await client.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
  const result = await expectReply(replies, 2);
  await client.close();
  return (result as { tools: { name: string }[] }).tools.map((t) => t.name).sort();
}

async function expectReply(replies: Map<number, unknown>, id: number): Promise<unknown> {
  await expect.poll(() => replies.has(id)).toBe(true);
  return replies.get(id);
}

describe('PipelineTools: the pipeline tools of one server', () => {
  it('leaves out a pipeline whose schema the SDK cannot compile, saying so, and offers the others', async () => {
    const server = new McpServer({ name: 'troupe', version: '0' }, { capabilities: { tools: {} } });
    const warnings: string[] = [];
    const tools = new PipelineTools(
      server,
      { who: { name: 'ops', scopes: ['admin'] } } as unknown as PipelineCallContext,
      { who: { name: 'ops', scopes: ['admin'] } } as never,
      (message) => void warnings.push(message),
    );
    tools.sync([
      registration('odd', {
        $id: 'urn:x',
        type: 'object',
        properties: { a: { $ref: '#/$defs/a' } },
        $defs: { a: { type: 'string' } },
      }),
      registration('plain'),
    ]);
    expect(await listedTools(server)).toEqual(['plain', 'troupe_start']);
    expect(warnings).toEqual([expect.stringMatching(/^pipeline odd is not offered as a tool: /)]);
  });
});
