import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { ModelError, type ModelProvider, PriceTable } from '@troupe/llm';
import { formatPath, type PipelineVersion } from '@troupe/protocol';
import type { Logger, Tool } from '@troupe/runtime';
import { type Document, LineCounter, parseDocument } from 'yaml';
import { evalsProblems } from '../evals/onlineScoring.ts';
import { checkFlow, jsonSchemaProblem, type Problem } from './checkFlow.ts';
import { ConfigError, type ConfigIssue } from './configError.ts';
import { suggestion } from './didYouMean.ts';
import { agentSteps } from './flowLayout.ts';
import {
  createProvider,
  type Env,
  type FileSource,
  keyEnvOf,
  modelLabel,
  resolveModelRef,
  withRetries,
} from './modelFactory.ts';
import { isRemoteAgentConfig, type ModelConfig, PipelineConfig } from './pipelineSchema.ts';
import { pipelineVersion } from './pipelineVersion.ts';
import { type RemoteAgentSettings, remoteAgentSettings } from './remoteAgents.ts';
import { type ImportModule, loadToolModules } from './toolModules.ts';
import { positionAt, positionOf } from './yamlPosition.ts';

/** A pipeline file, validated, with each agent's model built. */
export interface LoadedPipeline {
  file: string;
  config: PipelineConfig;
  /** The version this file makes: its config and the files it refers to, with their content hash. */
  version: PipelineVersion;
  /** Each agent's model: its primary with retries, then its fallbacks. */
  agentModels: ReadonlyMap<string, ModelProvider>;
  /** The agents that live in other systems (A2A), as the host calls them. */
  remoteAgents: ReadonlyMap<string, RemoteAgentSettings>;
  prices: PriceTable;
  /** The tools of the modules the file names under `tools.modules`, which its agents may declare beside the host's. */
  tools: readonly Tool[];
  /**
   * How the file's modules were imported (`LoadOptions.importModule`): its `module` scorers are imported the same way.
   * Node's `import()` when absent.
   */
  importModule?: ImportModule;
}

export interface LoadOptions {
  /** Names of the tools agents may declare. */
  toolNames: readonly string[];
  /** Where API keys are read from; `process.env` when absent. */
  env?: Env;
  /** Refuse a model whose API key variable is unset (default true; `troupe validate --no-keys` turns it off). */
  requireKeys?: boolean;
  /** Allow `mcpServers` that start a local command (stdio); off unless the operator opts in. */
  allowMcpCommands?: boolean;
  /**
   * Loads the file's tool modules (`tools.modules`), given each one's absolute path. Node's `import()` when absent,
   * which loads JavaScript only; `troupe` passes one that loads TypeScript too.
   */
  importModule?: ImportModule;
  /** Where its models' providers say what a call could not do as asked (a server that refused the prompt-cache fields). */
  logger?: Pick<Logger, 'warn'>;
}

/**
 * Reads and validates a pipeline file and builds its agents' models. Every problem is reported at once, each
 * with the file, the line and the path inside the file, in a `ConfigError` — including an API key variable
 * that an agent's model needs and the environment lacks.
 */
export async function loadPipeline(file: string, options: LoadOptions): Promise<LoadedPipeline> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    const why = unreadable(error as NodeJS.ErrnoException);
    throw new ConfigError(file, [{ path: '', message: why }], { cause: error, headline: `${file}: ${why}` });
  }
  if (text.trim() === '') {
    const why =
      'the file is empty; a pipeline needs at least version, name, agents and flow (`troupe init` writes one to start from)';
    throw new ConfigError(file, [{ path: '', message: why }], { headline: `${file}: ${why}` });
  }
  const { config, locate } = parseLocated(text, file);
  const baseDir = dirname(resolve(file));
  // A module's code runs here, at load: its tools' names are what agents may declare.
  const modules = await loadToolModules(config.tools?.modules ?? [], {
    baseDir,
    taken: options.toolNames,
    ...(options.importModule ? { importModule: options.importModule } : {}),
  });
  const moduleIssues = modules.problems.map(({ index, error }) => ({
    ...locate(['tools', 'modules', index], error.message),
    code: error.code,
  }));
  // Where a module did not load, the tools it would have given are unknown: not naming them again is clearer.
  const toolNames = [...options.toolNames, ...modules.tools.map((t) => t.tool.name)];
  const problems = checkReferences(config, { ...options, toolNames }, moduleIssues.length === 0);
  if (moduleIssues.length > 0 || problems.length > 0)
    throw new ConfigError(file, [...moduleIssues, ...problems.map((p) => locate(p.path, p.message))]);
  const files: Record<string, string> = {};
  const fromDisk: FileSource = async (path) => {
    const source = resolve(baseDir, path);
    try {
      files[path] = await readFile(source, 'utf8');
    } catch (error) {
      throw new ModelError('config', `cannot read script ${source}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    return { text: files[path], source };
  };
  const env = options.env ?? process.env;
  const requireKeys = options.requireKeys ?? true;
  const remote = remoteAgentSettings(config, env, requireKeys);
  if (remote.problems.length > 0)
    throw new ConfigError(
      file,
      remote.problems.map((p) => locate(p.path, p.message)),
    );
  const agentModels = await buildAgentModels(
    config,
    file,
    fromDisk,
    env,
    locate,
    requireKeys,
    options.logger,
  );
  const version = pipelineVersion(config, files, new Date());
  const loaded: LoadedPipeline = {
    file,
    config,
    version,
    agentModels,
    remoteAgents: remote.agents,
    prices: new PriceTable(config.prices),
    tools: modules.tools.map((t) => t.tool),
    ...(options.importModule ? { importModule: options.importModule } : {}),
  };
  // Its scorers are made as online scoring will make them, so a bad one is refused now, not at a task's end.
  const evalIssues = evalsProblems(loaded, { env, requireKeys });
  if (evalIssues.length > 0)
    throw new ConfigError(
      file,
      evalIssues.map((p) => locate(p.path, p.message)),
    );
  return loaded;
}

/**
 * A stored version of a pipeline, loaded as its file was: validated again and its agents' models built, each
 * script from the version itself. `label` names it in messages (`pipeline demo version 3f2a…`).
 */
export async function loadStoredVersion(
  version: PipelineVersion,
  label: string,
  options: Pick<LoadOptions, 'env' | 'requireKeys' | 'logger'>,
): Promise<LoadedPipeline> {
  const parsed = PipelineConfig.safeParse(version.config);
  if (!parsed.success) {
    throw new ConfigError(
      label,
      parsed.error.issues.map((issue) => ({
        path: formatPath(issue.path),
        message: readable(issue.message),
      })),
    );
  }
  const fromVersion: FileSource = async (path) => {
    const text = version.files[path];
    if (text === undefined) throw new ModelError('config', `${label} holds no file ${path}`);
    return { text, source: `${label}: ${path}` };
  };
  const env = options.env ?? process.env;
  const remote = remoteAgentSettings(parsed.data, env, options.requireKeys ?? true);
  if (remote.problems.length > 0)
    throw new ConfigError(
      label,
      remote.problems.map((p) => ({ path: formatPath(p.path), message: p.message })),
    );
  const agentModels = await buildAgentModels(
    parsed.data,
    label,
    fromVersion,
    env,
    (path, message) => ({ path: formatPath(path), message }),
    options.requireKeys ?? true,
    options.logger,
  );
  return {
    file: label,
    config: parsed.data,
    version,
    agentModels,
    remoteAgents: remote.agents,
    prices: new PriceTable(parsed.data.prices),
    // A stored version's modules are not loaded: its agents get the tools of the host that runs them.
    tools: [],
  };
}

/** Why a pipeline file cannot be read, in a person's words. */
function unreadable(error: NodeJS.ErrnoException): string {
  if (error.code === 'ENOENT') return 'no such file';
  if (error.code === 'EISDIR') return 'this is a directory, not a pipeline file';
  if (error.code === 'EACCES') return 'permission denied';
  return `cannot read it: ${error.message}`;
}

/**
 * Parses and validates pipeline YAML text; `file` is used in messages. Its tool modules are not loaded, so their
 * tools are unknown here: `loadPipeline` loads them.
 */
export function parsePipeline(text: string, file: string, options: LoadOptions): PipelineConfig {
  const { config, locate } = parseLocated(text, file);
  const problems = checkReferences(config, options, true);
  if (problems.length > 0)
    throw new ConfigError(
      file,
      problems.map((p) => locate(p.path, p.message)),
    );
  return config;
}

type Locate = (path: readonly PropertyKey[], message: string) => ConfigIssue;

/** Parses and validates the text against the schema; names that refer to others are checked by the caller. */
function parseLocated(text: string, file: string): { config: PipelineConfig; locate: Locate } {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true, merge: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      file,
      doc.errors.map((e) => ({
        path: '',
        message: e.message.split('\n')[0] ?? e.message,
        ...positionAt(lines, e.pos[0]),
      })),
    );
  }
  const locate: Locate = (path, message) => locateIn(doc, lines, path, message);
  const raw: unknown = doc.toJS({ maxAliasCount: 1_000 });
  const parsed = PipelineConfig.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(
      file,
      parsed.error.issues.map((issue) => locate(issue.path, readable(issue.message))),
    );
  }
  return { config: parsed.data, locate };
}

/**
 * Checks what a schema cannot: that every name used is defined, and that the flow's loops point backwards.
 * `toolsKnown` false: some tools could not be learnt (a module did not load), so unknown tool names are not reported.
 */
function checkReferences(config: PipelineConfig, options: LoadOptions, toolsKnown: boolean): Problem[] {
  const problems: Problem[] = [];
  const models = Object.keys(config.models);
  const agents = Object.keys(config.agents);
  const checkRef = (ref: string | undefined, path: PropertyKey[]) => {
    if (ref !== undefined && resolveModelRef(config, ref) === undefined) {
      problems.push({ path, message: `no model named "${ref}" under models${suggestion(ref, models)}` });
    }
  };
  checkRef(config.defaults.model, ['defaults', 'model']);
  if (config.input !== undefined) {
    const invalid = jsonSchemaProblem(config.input);
    if (invalid) problems.push({ path: ['input'], message: `not a usable JSON Schema: ${invalid}` });
    else if (config.input.type !== undefined && config.input.type !== 'object')
      problems.push({
        path: ['input', 'type'],
        message: 'a task input is an object: the schema must say type: object',
      });
  }
  const reviewers = new Set(
    agentSteps(config.flow)
      .filter((s) => s.kind === 'review')
      .map((s) => s.agent),
  );
  for (const [name, agent] of Object.entries(config.agents)) {
    // A remote agent has no model, tools or output schema here (the schema refused them).
    if (isRemoteAgentConfig(agent)) continue;
    const model = agent.model ?? config.defaults.model;
    if (model === undefined) {
      problems.push({ path: ['agents', name], message: 'no model: set model here or defaults.model' });
    }
    checkRef(agent.model, ['agents', name, 'model']);
    for (const [i, ref] of agent.fallback.entries()) checkRef(ref, ['agents', name, 'fallback', i]);
    if (agent.output !== undefined) {
      if (reviewers.has(name)) {
        problems.push({
          path: ['agents', name, 'output'],
          message: `agent ${name} reviews (its output is a verdict), so it cannot declare another output schema`,
        });
      } else {
        const invalid = jsonSchemaProblem(agent.output);
        if (invalid)
          problems.push({
            path: ['agents', name, 'output'],
            message: `not a usable JSON Schema: ${invalid}`,
          });
      }
    }
    agent.tools.forEach((tool, i) => {
      const server = tool.includes('.') ? tool.slice(0, tool.indexOf('.')) : undefined;
      if (server !== undefined) {
        if (!(server in config.mcpServers)) {
          problems.push({
            path: ['agents', name, 'tools', i],
            message: `"${tool}" names MCP server "${server}", which is not under mcpServers${suggestion(server, Object.keys(config.mcpServers))}`,
          });
        }
        return;
      }
      if (toolsKnown && !options.toolNames.includes(tool)) {
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
  for (const [name, server] of Object.entries(config.mcpServers)) {
    if (server.transport === 'stdio' && !options.allowMcpCommands) {
      problems.push({
        path: ['mcpServers', name, 'command'],
        message:
          'an MCP server that starts a local command runs code on the coordinator host; allow it with ' +
          '`troupe up --allow-mcp-commands` (or TROUPE_ALLOW_MCP_COMMANDS=1)',
      });
    }
  }
  const summarizer = config.sessions?.summarizer;
  if (summarizer !== undefined && !(summarizer in config.agents)) {
    problems.push({
      path: ['sessions', 'summarizer'],
      message: `no agent named "${summarizer}" under agents${suggestion(summarizer, agents)}`,
    });
  } else if (summarizer !== undefined && config.agents[summarizer]?.a2a !== undefined) {
    problems.push({
      path: ['sessions', 'summarizer'],
      message: `agent ${summarizer} is remote (a2a): it has no model here to summarize with; name a local agent`,
    });
  }
  problems.push(...checkFlow(config));
  return problems;
}

/**
 * Builds every agent's model chain (primary, then fallbacks). Entries are built once and shared. An entry whose
 * API key variable is unset is reported at the agent that uses it, so the message names both.
 */
async function buildAgentModels(
  config: PipelineConfig,
  file: string,
  files: FileSource,
  env: Env,
  locate: Locate,
  requireKeys: boolean,
  logger?: Pick<Logger, 'warn'>,
): Promise<Map<string, ModelProvider>> {
  const built = new Map<string, Promise<Built>>();
  const build = (ref: string, model: ModelConfig): Promise<Built> => {
    let result = built.get(ref);
    if (!result) {
      result = createProvider(model, files, env, logger).then(
        (provider) => ({ provider }),
        (error: unknown) => ({ error: error instanceof ModelError ? error.message : String(error) }),
      );
      built.set(ref, result);
    }
    return result;
  };
  // Scripts are read even for entries no agent uses, so a broken one is reported now, not when it is first used.
  for (const [name, model] of Object.entries(config.models)) {
    if (model.provider === 'scripted') void build(name, model);
  }
  const issues: ConfigIssue[] = [];
  const agentModels = new Map<string, ModelProvider>();
  for (const [name, agent] of Object.entries(config.agents)) {
    if (isRemoteAgentConfig(agent)) continue;
    const refs = [agent.model ?? config.defaults.model ?? '', ...agent.fallback];
    const chain: ModelProvider[] = [];
    for (const [i, ref] of refs.entries()) {
      const model = resolveModelRef(config, ref);
      if (!model) continue; // reported by checkReferences
      const keyEnv = keyEnvOf(model);
      if (requireKeys && keyEnv !== undefined && !env[keyEnv]) {
        const path = i === 0 ? ['agents', name, 'model'] : ['agents', name, 'fallback', i - 1];
        const message = `agent ${name} uses ${modelLabel(model)}, which needs the environment variable ${keyEnv}; it is not set`;
        issues.push(locate(path, message));
        continue;
      }
      const result = await build(ref, model);
      if ('provider' in result) chain.push(result.provider);
    }
    const primary = resolveModelRef(config, refs[0] ?? '');
    if (primary && chain.length === refs.length) agentModels.set(name, withRetries(primary, chain));
  }
  for (const [ref, result] of built) {
    const outcome = await result;
    if ('error' in outcome) issues.push(locate(ref.includes(':') ? [] : ['models', ref], outcome.error));
  }
  if (issues.length > 0) throw new ConfigError(file, issues);
  return agentModels;
}

/** zod says a missing key "expected string, received undefined"; people say "missing". */
function readable(message: string): string {
  const missing = /^Invalid input: expected (.+), received undefined$/.exec(message);
  return missing ? `missing (required: ${missing[1]})` : message;
}

type Built = { provider: ModelProvider } | { error: string };

/** Locates a problem at the deepest key or item on `path` that exists in the document. */
function locateIn(
  doc: Document,
  lines: LineCounter,
  path: readonly PropertyKey[],
  message: string,
): ConfigIssue {
  return { path: formatPath(path), message, ...positionOf(doc, lines, path) };
}
