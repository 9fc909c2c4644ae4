import {
  builtinTools,
  ConfigError,
  loadPipeline,
  type PipelineConfig,
  shortVersion,
} from '@troupe/coordinator';
import { CliError } from '../server.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface ValidateOptions {
  print: boolean;
  /** Check that API key variables are set (commander's --no-keys makes this false). */
  keys: boolean;
  allowMcpCommands: boolean;
}

/** `troupe validate`: checks pipeline files without starting anything; with --print shows the resolved config. */
export async function validate(files: string[], options: ValidateOptions): Promise<number> {
  const toolNames = builtinTools().names();
  let failures = 0;
  for (const file of files) {
    try {
      const { config, version, tools } = await loadPipeline(file, {
        toolNames,
        requireKeys: options.keys,
        allowMcpCommands: options.allowMcpCommands || process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
        importModule: importToolModule,
      });
      if (options.print) process.stdout.write(`${JSON.stringify(config, null, 2)}\n`);
      // The version a coordinator started with this file would record on its tasks (`troupe migrate --to` takes it).
      else
        process.stdout.write(
          `✓ ${file}: pipeline ${config.name} — ${describe(config, tools)}; version ${shortVersion(version.hash)}\n`,
        );
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      failures++;
      process.stderr.write(`✗ ${error.message}\n`);
    }
  }
  if (failures > 0 && files.length > 1)
    throw new CliError(`${failures} of ${files.length} files are invalid`);
  return failures > 0 ? 1 : 0;
}

function describeStep(step: PipelineConfig['flow'][number]): string {
  const when = step.when === undefined ? '' : ' (when …)';
  switch (step.kind) {
    case 'review':
      return `${step.id} (review: reject → ${step.onReject}, ≤${step.maxRounds} rounds)${when}`;
    case 'parallel':
      return `${step.id} (parallel, join ${step.join}: ${Object.keys(step.branches).join(' | ')})${when}`;
    case 'foreach':
      return `${step.id} (foreach ≤${step.maxItems} of ${step.items}, ${step.concurrency} at a time: ${step.do
        .map((s) => describeStep(s as PipelineConfig['flow'][number]))
        .join(' → ')})${when}`;
    case 'route':
      return step.agent !== undefined
        ? `${step.id} (${step.agent} picks: ${Object.keys(step.targets ?? {}).join(', ')})${when}`
        : `${step.id} (route: ${Object.entries(step.cases ?? {})
            .map(([value, to]) => `${value} → ${to}`)
            .join(', ')}${step.default === undefined ? '' : `, else → ${step.default}`})${when}`;
    default:
      return `${step.id}${when}`;
  }
}

function describe(config: PipelineConfig, tools: readonly { name: string }[]): string {
  const flow = config.flow.map(describeStep).join(' → ');
  const agents = Object.keys(config.agents).length;
  // The tools its modules gave, so a module that loaded but exported fewer tools than meant shows here.
  const own = tools.length > 0 ? `; own tools: ${tools.map((t) => t.name).join(', ')}` : '';
  return `${agents} agent${agents === 1 ? '' : 's'}${own}; flow: ${flow}`;
}
