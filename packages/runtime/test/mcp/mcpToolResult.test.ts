import { describe, expect, it } from 'vitest';
import { renderMcpToolResult } from '../../src/mcp/mcpToolResult.ts';
import { ToolError } from '../../src/tools/toolError.ts';

describe('renderMcpToolResult', () => {
  it('joins text content with newlines', () => {
    const text = renderMcpToolResult('srv.t', {
      content: [
        { type: 'text', text: 'one' },
        { type: 'text', text: 'two' },
      ],
    });
    expect(text).toBe('one\ntwo');
  });

  it('summarises images, audio and resources instead of pasting their bytes', () => {
    const text = renderMcpToolResult('srv.t', {
      content: [
        { type: 'image', mimeType: 'image/png', data: Buffer.from('12345').toString('base64') },
        { type: 'audio', mimeType: 'audio/wav', data: Buffer.alloc(10).toString('base64') },
        { type: 'resource', resource: { uri: 'file:///a.txt', text: 'long text' } },
        { type: 'resource_link', uri: 'https://example.com/doc', name: 'doc' },
      ],
    });
    expect(text).toBe(
      '[image: image/png, 5 bytes]\n[audio: audio/wav, 10 bytes]\n[resource: file:///a.txt]\n[resource: https://example.com/doc]',
    );
  });

  it('trusts the text blocks: structured content is rendered as JSON only when there is no text', () => {
    expect(
      renderMcpToolResult('srv.t', {
        content: [{ type: 'text', text: 'done' }],
        structuredContent: { n: 1 },
      }),
    ).toBe('done');
    expect(
      renderMcpToolResult('srv.t', {
        content: [{ type: 'text', text: '{ "n": 1 }' }],
        structuredContent: { n: 1 },
      }),
    ).toBe('{ "n": 1 }');
    expect(renderMcpToolResult('srv.t', { content: [], structuredContent: { n: 1 } })).toBe('{"n":1}');
    expect(
      renderMcpToolResult('srv.t', {
        content: [{ type: 'resource_link', uri: 'file:///a.png', name: 'a' }],
        structuredContent: { width: 2 },
      }),
    ).toBe('[resource: file:///a.png]\n{"width":2}');
  });

  it("gives server-filesystem's reply once, not its text and then the same text again as JSON", () => {
    // @modelcontextprotocol/server-filesystem's list_directory: the listing as text, and again as structured content.
    const listing = '[FILE] a.txt\n[DIR] docs';
    expect(
      renderMcpToolResult('files.list_directory', {
        content: [{ type: 'text', text: listing }],
        structuredContent: { content: listing },
      }),
    ).toBe(listing);
    // @modelcontextprotocol/server-memory's read_graph: pretty JSON text, and the same graph as structured content.
    const graph = { entities: [{ name: 'Ada', entityType: 'person', observations: [] }], relations: [] };
    expect(
      renderMcpToolResult('memory.read_graph', {
        content: [{ type: 'text', text: JSON.stringify(graph, null, 2) }],
        structuredContent: graph,
      }),
    ).toBe(JSON.stringify(graph, null, 2));
  });

  it("throws a failed ToolError with the server's text for an isError result", () => {
    const fail = () =>
      renderMcpToolResult('srv.t', { content: [{ type: 'text', text: 'disk full' }], isError: true });
    expect(fail).toThrow(ToolError);
    expect(fail).toThrow('disk full');
    expect(() => renderMcpToolResult('srv.t', { content: [], isError: true })).toThrow(
      expect.objectContaining({ code: 'failed', message: 'srv.t failed without saying why' }),
    );
  });
});
