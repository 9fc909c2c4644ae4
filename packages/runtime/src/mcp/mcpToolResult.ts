import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import { ToolError } from '../tools/toolError.ts';

/**
 * The text the model sees for an MCP tool's result: text content as is, other content summarised. Structured
 * content is rendered as JSON only when there is no text block: the MCP spec asks servers to repeat it as text,
 * and real servers send their own rendering of it (server-filesystem's `{ content: "…" }` echoes its text block),
 * so the text is trusted and the model reads each result once. A result flagged `isError` throws `ToolError`
 * (`failed`) with the server's text, so the model reads it as a tool error.
 *
 * @example
 * renderMcpToolResult('srv.add', { content: [{ type: 'text', text: '1+2=3' }], structuredContent: { sum: 3 } });
 * // '1+2=3'
 * renderMcpToolResult('srv.add', { content: [], structuredContent: { sum: 3 } });
 * // '{"sum":3}'
 */
export function renderMcpToolResult(toolName: string, result: CallToolResult): string {
  const parts = result.content.map(renderBlock);
  const structured = result.structuredContent;
  const hasText = result.content.some((block) => block.type === 'text');
  if (structured !== undefined && !hasText) parts.push(JSON.stringify(structured));
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
