import { builtinTools, ConfigError, flowGraph, flowMermaid, loadPipeline } from '@troupe/coordinator';
import { CliError } from '../server.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface GraphOptions {
  json: boolean;
}

/**
 * `troupe graph`: a pipeline's flow as a Mermaid flowchart (paste it in a Markdown file, GitHub draws it), or with
 * --json as the graph the gateway serves the dashboard. Checks the file as `troupe validate` does, keys aside.
 */
export async function graph(file: string, options: GraphOptions): Promise<number> {
  let config: Awaited<ReturnType<typeof loadPipeline>>['config'];
  try {
    ({ config } = await loadPipeline(file, {
      toolNames: builtinTools().names(),
      requireKeys: false,
      allowMcpCommands: true,
      importModule: importToolModule,
    }));
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError(error.message);
    throw error;
  }
  const drawn = flowGraph(config);
  process.stdout.write(options.json ? `${JSON.stringify(drawn, null, 2)}\n` : flowMermaid(drawn));
  return 0;
}
