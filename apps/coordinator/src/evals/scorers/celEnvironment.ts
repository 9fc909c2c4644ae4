import type { Environment } from '@marcbachmann/cel-js';
import type { CEL_OPTIONS } from '../../config/expressions.ts';

/**
 * The variables of a CEL scorer for one run, as data a thread can be sent; `tools` is made from `trajectory` where
 * the expression is evaluated.
 */
export type CelData = Record<string, unknown> & { trajectory: string[] };

/** A CEL scorer's environment, and its variables for a run's data. */
export interface CelScorerEnvironment {
  environment: Environment;
  variables(data: CelData): Record<string, unknown>;
}

/**
 * Makes a CEL scorer's environment from cel-js's `Environment`. It refers to nothing outside itself, so the pattern
 * thread (see PatternWorker) runs this very function from its source text, and the two environments cannot differ.
 * `tools.called("run_command")` counts one tool's calls, `tools.called()` all.
 */
export function celScorerEnvironment(
  Env: typeof Environment,
  options: typeof CEL_OPTIONS,
): CelScorerEnvironment {
  class ToolCalls {
    names: readonly string[];

    constructor(names: readonly string[]) {
      this.names = names;
    }
  }
  const environment = new Env(options)
    .registerType('Tools', { ctor: ToolCalls, fields: {} })
    .registerVariable('output', 'string')
    .registerVariable('json', 'dyn')
    .registerVariable('status', 'string')
    .registerVariable('usage', 'map')
    .registerVariable('durationMs', 'int')
    .registerVariable('steps', 'map')
    .registerVariable('trajectory', 'list')
    .registerVariable('tools', 'Tools')
    .registerVariable('safety', 'map')
    .registerVariable('case', 'map')
    .registerFunction({
      name: 'called',
      receiverType: 'Tools',
      returnType: 'int',
      handler: (tools: ToolCalls, name: string) =>
        BigInt(tools.names.filter((called) => called === name).length),
      params: [{ name: 'tool', type: 'string' }],
    })
    .registerFunction({
      name: 'called',
      receiverType: 'Tools',
      returnType: 'int',
      handler: (tools: ToolCalls) => BigInt(tools.names.length),
      params: [],
    });
  return { environment, variables: (data) => ({ ...data, tools: new ToolCalls(data.trajectory) }) };
}
