import { connectMcpServers, type Logger, ToolRegistry } from '@troupe/runtime';
import { builtinTools } from '../config/builtinTools.ts';
import type { LoadedPipeline } from '../config/loadPipeline.ts';

/**
 * The built-in tools on the shared `memory` bucket. A run off the record never runs them: memory is shared with other
 * tasks and holds what it holds now, not what the recorded run read, so they answer from the record and write nothing.
 */
export const MEMORY_TOOLS: ReadonlySet<string> = new Set(['remember', 'recall']);

export interface RealToolsOptions {
  /** The registry the tools are added to; a new one when absent. */
  into?: ToolRegistry;
  /** The environment the pipeline's MCP servers are started with; `process.env` when absent. */
  env?: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
}

/** The tools that may run for real, and how to end the MCP servers started for them. */
export interface RealTools {
  registry: ToolRegistry;
  /** Ends the pipeline's MCP servers' connections, if any were made; safe to call more than once. */
  close(): Promise<void>;
}

/**
 * The pipeline's tools that may run for real in a run in this process (`troupe replay`'s, an eval case's in model
 * mode): the built-ins but {@link MEMORY_TOOLS}, the pipeline's tool modules, and its MCP servers' tools, on servers
 * connected now. Which of them a run then lets run is its own rule; this is what it chooses from.
 */
export async function realTools(
  pipeline: LoadedPipeline,
  options: RealToolsOptions = {},
): Promise<RealTools> {
  const registry = options.into ?? new ToolRegistry();
  const builtins = builtinTools();
  for (const name of builtins.names()) {
    const tool = builtins.get(name);
    if (tool && !MEMORY_TOOLS.has(name)) registry.register(tool);
  }
  for (const tool of pipeline.tools) registry.register(tool);
  if (Object.keys(pipeline.config.mcpServers).length === 0) return { registry, close: async () => {} };
  const mcp = await connectMcpServers(pipeline.config.mcpServers, {
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.env ? { env: options.env } : {}),
  });
  try {
    for (const tool of mcp.tools) registry.register(tool);
  } catch (error) {
    await mcp.close();
    throw error;
  }
  return { registry, close: () => mcp.close() };
}
