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

  it('appends structured content as JSON, unless a text block already is that JSON', () => {
    expect(
      renderMcpToolResult('srv.t', {
        content: [{ type: 'text', text: 'done' }],
        structuredContent: { n: 1 },
      }),
    ).toBe('done\n{"n":1}');
    expect(
      renderMcpToolResult('srv.t', {
        content: [{ type: 'text', text: '{ "n": 1 }' }],
        structuredContent: { n: 1 },
      }),
    ).toBe('{ "n": 1 }');
    expect(renderMcpToolResult('srv.t', { content: [], structuredContent: { n: 1 } })).toBe('{"n":1}');
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
