import { isDeepStrictEqual } from 'node:util';
import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import { ToolError } from '../tools/toolError.ts';

/**
 * The text the model sees for an MCP tool's result: text content as is, other content summarised, then the
 * structured content as JSON. A result flagged `isError` throws `ToolError` (`failed`) with the server's text, so
 * the model reads it as a tool error.
 *
 * @example
 * renderMcpToolResult('srv.add', { content: [{ type: 'text', text: '1+2=3' }], structuredContent: { sum: 3 } });
 * // '1+2=3\n{"sum":3}'
 */
export function renderMcpToolResult(toolName: string, result: CallToolResult): string {
  const parts = result.content.map(renderBlock);
  const structured = result.structuredContent;
  if (structured !== undefined && !echoesStructured(result.content, structured)) {
    parts.push(JSON.stringify(structured));
  }
  const text = parts.join('\n');
  if (result.isError) {
    throw new ToolError('failed', text === '' ? `${toolName} failed without saying why` : text);
  }
  return text;
}

function renderBlock(block: ContentBlock): string {
  switch (block.type) {
    case 'text':
      return block.text;
    case 'image':
    case 'audio':
      return `[${block.type}: ${block.mimeType}, ${Buffer.byteLength(block.data, 'base64')} bytes]`;
    case 'resource':
      return `[resource: ${block.resource.uri}]`;
    case 'resource_link':
      return `[resource: ${block.uri}]`;
    default:
      return `[${(block as { type: string }).type}]`;
  }
}

// Servers are asked to repeat structured content as JSON text for older clients; the model needs it once.
function echoesStructured(content: readonly ContentBlock[], structured: unknown): boolean {
  return content.some(
    (block) => block.type === 'text' && isDeepStrictEqual(parseJson(block.text), structured),
  );
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
