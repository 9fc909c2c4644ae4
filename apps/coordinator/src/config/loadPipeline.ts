import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { loadScript, ModelError, type ModelProvider, ScriptedProvider } from '@troupe/llm';
import { formatPath } from '@troupe/protocol';
import { type Document, isMap, isNode, isScalar, LineCounter, parseDocument } from 'yaml';
import { FINAL_STATES } from '../workflow/workflowTypes.ts';
import { ConfigError, type ConfigIssue } from './configError.ts';
import { suggestion } from './didYouMean.ts';
import { type ModelConfig, PipelineConfig } from './pipelineSchema.ts';

/** A pipeline file, validated, with its model providers built. */
export interface LoadedPipeline {
  file: string;
  config: PipelineConfig;
  models: ReadonlyMap<string, ModelProvider>;
}

export interface LoadOptions {
  /** Names of the tools agents may declare. */
  toolNames: readonly string[];
}

/**
 * Reads and validates a pipeline file. Every problem is reported at once, each with the file, the line and
 * the path inside the file, in a `ConfigError`.
 */
export async function loadPipeline(file: string, options: LoadOptions): Promise<LoadedPipeline> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new ConfigError(file, [{ path: '', message: `cannot read file: ${(error as Error).message}` }], {
      cause: error,
    });
  }
  const config = parsePipeline(text, file, options);
  const models = await buildModels(config, file);
  return { file, config, models };
}

/** Parses and validates pipeline YAML text; `file` is used in messages. */
export function parsePipeline(text: string, file: string, options: LoadOptions): PipelineConfig {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      file,
      doc.errors.map((e) => ({
        path: '',
        message: e.message.split('\n')[0] ?? e.message,
        ...position(lines, e.pos[0]),
      })),
    );
  }
  const raw: unknown = doc.toJS({ maxAliasCount: 1_000 });
  const parsed = PipelineConfig.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(
      file,
      parsed.error.issues.map((issue) => locate(doc, lines, issue.path, issue.message)),
    );
  }
  const problems = checkReferences(parsed.data, options);
  if (problems.length > 0) {
    throw new ConfigError(
      file,
      problems.map((p) => locate(doc, lines, p.path, p.message)),
    );
  }
  return parsed.data;
}

interface Problem {
  path: PropertyKey[];
  message: string;
}

/** Checks what a schema cannot: that every name used is defined, and that the flow's loops point backwards. */
function checkReferences(config: PipelineConfig, options: LoadOptions): Problem[] {
  const problems: Problem[] = [];
  const models = Object.keys(config.models);
  const agents = Object.keys(config.agents);
  if (config.defaults.model !== undefined && !(config.defaults.model in config.models)) {
    problems.push({
      path: ['defaults', 'model'],
      message: `no model named "${config.defaults.model}" under models${suggestion(config.defaults.model, models)}`,
    });
  }
  for (const [name, agent] of Object.entries(config.agents)) {
    const model = agent.model ?? config.defaults.model;
    if (model === undefined) {
      problems.push({ path: ['agents', name], message: 'no model: set model here or defaults.model' });
    } else if (agent.model !== undefined && !(agent.model in config.models)) {
      problems.push({
        path: ['agents', name, 'model'],
        message: `no model named "${agent.model}" under models${suggestion(agent.model, models)}`,
      });
    }
    agent.tools.forEach((tool, i) => {
      if (!options.toolNames.includes(tool)) {
        problems.push({
          path: ['agents', name, 'tools', i],
          message: `unknown tool "${tool}"${suggestion(tool, options.toolNames)}; available: ${options.toolNames.join(', ')}`,
        });
      }
    });
    agent.permissions.forEach((rule, i) => {
      if (!agent.tools.includes(rule.tool)) {
        problems.push({
          path: ['agents', name, 'permissions', i, 'tool'],
          message: `rule for "${rule.tool}", which agent ${name} does not declare under tools`,
        });
      }
    });
  }
  const seen: string[] = [];
  config.flow.forEach((step, i) => {
    if ((FINAL_STATES as readonly string[]).includes(step.id)) {
      problems.push({
        path: ['flow', i, 'id'],
        message: `"${step.id}" is reserved for the workflow's final state; pick another step id`,
      });
    }
    if (seen.includes(step.id)) {
      problems.push({ path: ['flow', i, 'id'], message: `duplicate step id "${step.id}"` });
    }
    if (!(step.agent in config.agents)) {
      problems.push({
        path: ['flow', i, 'agent'],
        message: `no agent named "${step.agent}" under agents${suggestion(step.agent, agents)}`,
      });
    }
    step.context?.forEach((ref, j) => {
      if (!seen.includes(ref)) {
        problems.push({
          path: ['flow', i, 'context', j],
          message: `"${ref}" is not an earlier step${suggestion(ref, seen)}`,
        });
      }
    });
    if (step.kind === 'review' && !seen.includes(step.onReject)) {
      problems.push({
        path: ['flow', i, 'onReject'],
        message: `"${step.onReject}" is not an earlier step${suggestion(step.onReject, seen)}; a review sends work back to a step before it`,
      });
    }
    seen.push(step.id);
  });
  return problems;
}

/** Builds each model's provider; a scripted model's script is read relative to the pipeline file. */
async function buildModels(config: PipelineConfig, file: string): Promise<Map<string, ModelProvider>> {
  const models = new Map<string, ModelProvider>();
  const issues: ConfigIssue[] = [];
  for (const [name, model] of Object.entries(config.models)) {
    try {
      models.set(name, await buildModel(model, dirname(resolve(file))));
    } catch (error) {
      const message = error instanceof ModelError ? error.message : String(error);
      issues.push({ path: formatPath(['models', name]), message });
    }
  }
  if (issues.length > 0) throw new ConfigError(file, issues);
  return models;
}

async function buildModel(model: ModelConfig, baseDir: string): Promise<ModelProvider> {
  switch (model.provider) {
    case 'scripted':
      return new ScriptedProvider(await loadScript(resolve(baseDir, model.script)), model.model);
  }
}

/** Finds the line of the deepest key or item on `path` that exists in the document. */
function locate(
  doc: Document,
  lines: LineCounter,
  path: readonly PropertyKey[],
  message: string,
): ConfigIssue {
  for (let depth = path.length; depth >= 0; depth--) {
    const offset = offsetOf(doc, path.slice(0, depth));
    if (offset !== undefined) return { path: formatPath(path), message, ...position(lines, offset) };
  }
  return { path: formatPath(path), message };
}

/** Where a path starts in the text: at its key for a map entry (not its value), else at the node. */
function offsetOf(doc: Document, path: readonly PropertyKey[]): number | undefined {
  const last = path.at(-1);
  if (typeof last === 'string') {
    const parent = path.length === 1 ? doc.contents : doc.getIn(path.slice(0, -1) as unknown[], true);
    if (isMap(parent)) {
      const pair = parent.items.find((item) => isScalar(item.key) && item.key.value === last);
      if (pair && isNode(pair.key) && pair.key.range) return pair.key.range[0];
    }
  }
  const node = path.length === 0 ? doc.contents : doc.getIn(path as unknown[], true);
  return isNode(node) && node.range ? node.range[0] : undefined;
}

function position(lines: LineCounter, offset: number): { line: number; column: number } {
  const { line, col } = lines.linePos(offset);
  return { line, column: col };
}
