import { askHumanTool, builtinToolList, recallTool, rememberTool, ToolRegistry } from '@troupe/runtime';

/** A registry holding every tool a pipeline may declare without writing code. */
export function builtinTools(): ToolRegistry {
  const registry = new ToolRegistry();
  for (const tool of [...builtinToolList(), askHumanTool, rememberTool, recallTool]) registry.register(tool);
  return registry;
}
