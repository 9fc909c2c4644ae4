import { describe, expect, it } from 'vitest';
import { builtinToolList } from '../../src/tools/builtinTools.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

describe('builtinToolList', () => {
  it('holds the file tools, run_command and http_fetch, all registrable', () => {
    const tools = builtinToolList();
    expect(tools.map((tool) => tool.name)).toEqual([
      'read_file',
      'write_file',
      'list_files',
      'edit_file',
      'search_files',
      'run_command',
      'http_fetch',
    ]);
    const registry = new ToolRegistry();
    for (const tool of tools) registry.register(tool);
    const [http] = registry.definitions(['http_fetch']);
    expect(http?.parameters).toMatchObject({ type: 'object', required: ['url'] });
  });

  it('returns a fresh list each time', () => {
    expect(builtinToolList()).not.toBe(builtinToolList());
  });
});
