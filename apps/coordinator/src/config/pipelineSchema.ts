import { Name, ScorerSpec } from '@troupe/protocol';
import { McpServerConfig } from '@troupe/runtime';
import { z } from 'zod';
import { suggestion } from './didYouMean.ts';
import { agentSteps } from './flowLayout.ts';

/**
 * An object with known keys only, except keys starting with `x-`: the sanctioned place for a user's own
 * annotations and YAML anchors. They are accepted and ignored; any other unknown key is an error.
 */
const withExtensions = <T extends z.ZodRawShape>(shape: T) =>
  z.looseObject(shape).superRefine(
    (value, ctx) => {
      for (const key of Object.keys(value)) {
        if (!(key in shape) && !key.startsWith('x-')) {
          ctx.addIssue({
            code: 'custom',
            path: [key],
            message: `unknown key "${key}"${suggestion(key, Object.keys(shape))}; allowed: ${Object.keys(shape).join(', ')}; custom keys must start with "x-"`,
          });
        }
      }
      // Run even when a required key is missing, so a misspelt key is named beside the one it should have been.
    },
    { when: ({ value }) => typeof value === 'object' && value !== null && !Array.isArray(value) },
  );

/** A model played from a script of replies: offline and deterministic. */
export const ScriptedModelConfig = withExtensions({
  provider: z.literal('scripted'),
  /** Path of the script, relative to the pipeline file. */
  script: z.string().min(1),
  model: z.string().default('scripted'),
});

const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name');

/** Words people write for a cache setting that are not one, each with the setting it means. */
const MEANT: Readonly<Record<string, string>> = {
  on: '"auto"',
  true: '"auto"',
  yes: '"auto"',
  enabled: '"auto"',
  false: '"off"',
  no: '"off"',
  none: '"off"',
  disabled: '"off"',
  '5m': '{ ttl: 5m }',
  '1h': '{ ttl: 1h }',
};

/** What is wrong with a `cache:` value that is none of the settings, in words a person can act on. */
function cacheSettingError(input: unknown): string {
  if (typeof input === 'object' && input !== null && !Array.isArray(input)) {
    const { ttl } = input as { ttl?: unknown };
    return ttl === undefined
      ? 'missing ttl: write { ttl: 5m } or { ttl: 1h }, or cache: auto | off'
      : `ttl ${JSON.stringify(ttl)} is not a cache lifetime; use 5m (the providers' default) or 1h`;
  }
  const word = String(input);
  const meant = MEANT[word.toLowerCase()];
  const hint = meant === undefined ? suggestion(word, ['auto', 'off']) : ` (did you mean ${meant}?)`;
  return `${JSON.stringify(input)} is not a cache setting${hint}; use auto (the default), off, { ttl: 5m } or { ttl: 1h }`;
}

/**
 * Prompt caching for a model entry (`CacheSetting` in `@troupe/llm`): `auto` (when absent) marks or keys the prompt's
 * stable prefix so the provider serves it from its cache, with the lifetime the runtime suggests per call; `off` sends
 * no cache markers or keys; `{ ttl }` is `auto` with that lifetime on every call.
 */
export const CacheConfig = z.union([z.enum(['auto', 'off']), withExtensions({ ttl: z.enum(['5m', '1h']) })], {
  error: (issue) => cacheSettingError(issue.input),
});

/** Settings every remote model shares. */
const remote = {
  /** The provider's model id, e.g. `gpt-5-mini`, `claude-sonnet-4-6`. */
  model: z.string().min(1),
  /** The environment variable holding the API key (never the key itself). */
  apiKeyEnv: EnvName.optional(),
  temperature: z.number().min(0).max(2).optional(),
  maxTokens: z.number().int().positive().optional(),
  /** Per-call timeout in seconds. */
  timeout: z.number().positive().max(3_600).default(120),
  /** Attempts per call before the fallbacks are tried (429, 5xx, timeouts and resets are retried). */
  maxAttempts: z.number().int().min(1).max(20).default(4),
  /** First backoff in seconds; doubles per attempt, jittered; a `retry-after` from the provider wins. */
  retryDelay: z.number().nonnegative().max(600).default(0.5),
  /** Prompt caching: `auto` when absent (see {@link CacheConfig}). */
  cache: CacheConfig.optional(),
};

export const OpenAIModelConfig = withExtensions({
  provider: z.literal('openai'),
  ...remote,
  baseURL: z.url().optional(),
});

export const AnthropicModelConfig = withExtensions({
  provider: z.literal('anthropic'),
  ...remote,
  baseURL: z.url().optional(),
});

/** Any server speaking the OpenAI Chat Completions API: Ollama, vLLM, llama.cpp, LiteLLM. */
export const OpenAICompatibleModelConfig = withExtensions({
  provider: z.literal('openai-compatible'),
  ...remote,
  baseURL: z.url(),
});

/** A model entry: which provider, which model, and its settings. */
export const ModelConfig = z.discriminatedUnion('provider', [
  ScriptedModelConfig,
  OpenAIModelConfig,
  AnthropicModelConfig,
  OpenAICompatibleModelConfig,
]);
export type ModelConfig = z.infer<typeof ModelConfig>;

/** A model by name under `models:`, or inline as `openai:<model>` / `anthropic:<model>`. */
export const ModelRef = z
  .string()
  .regex(
    /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?|(?:openai|anthropic):[A-Za-z0-9._:/-]+)$/,
    'must name an entry under models, or be openai:<model> or anthropic:<model>',
  );

/** USD per million tokens, overriding the shipped price table for a `provider:model` prefix. */
export const PriceConfig = withExtensions({
  input: z.number().nonnegative(),
  output: z.number().nonnegative(),
  /** What a token read from the prompt cache costs; when absent, 0.1 × `input` on `anthropic:` keys, else `input`. */
  cachedInput: z.number().nonnegative().optional(),
  /** A token written to the cache with the 5-minute lifetime; when absent, 1.25 × `input` on `anthropic:`, else `input`. */
  cacheWrite: z.number().nonnegative().optional(),
  /** A token written with the 1-hour lifetime; when absent, 2 × `input` on `anthropic:`, else `cacheWrite`. */
  cacheWrite1h: z.number().nonnegative().optional(),
});

/**
 * One permission rule. A call is refused when any matching rule says `deny`, waits for a person when one says
 * `ask`, and runs when one says `allow`; a tool with rules but no matching rule is refused.
 */
export const PermissionRuleConfig = withExtensions({
  tool: z.string().min(1),
  decision: z.enum(['allow', 'deny', 'ask']),
  /** Globs relative to the task workspace, for file tools. */
  paths: z.array(z.string().min(1)).min(1).optional(),
  /** Command prefixes, for run_command (`npm test` matches `npm test -- x`, not `npm testx`). */
  commands: z.array(z.string().min(1)).min(1).optional(),
  /** Host names, for http_fetch: exact, or `*.example.com` for subdomains. */
  hosts: z.array(z.string().min(1)).min(1).optional(),
  /** For run_command: let the command reach the network (the sandbox cuts it off otherwise). */
  network: z.boolean().optional(),
});
export type PermissionRuleConfig = z.infer<typeof PermissionRuleConfig>;

/** Limits on what an agent spends over a whole task. */
export const AgentBudgetConfig = withExtensions({
  /** Input plus output tokens. */
  maxTokens: z.number().int().positive().optional(),
  maxCostUsd: z.number().positive().optional(),
  maxModelCalls: z.number().int().positive().optional(),
});

/** Limits on what a task spends, all agents together; `timeout` is wall-clock seconds from acceptance. */
export const TaskBudgetConfig = withExtensions({
  maxTokens: z.number().int().positive().optional(),
  maxCostUsd: z.number().positive().optional(),
  maxModelCalls: z.number().int().positive().optional(),
  timeout: z
    .number()
    .positive()
    .max(30 * 86_400)
    .optional(),
  /**
   * Whether the time a task is held (`troupe pause`) counts against `timeout`: false (the default) moves its deadline
   * on by the time held; true keeps it where acceptance put it, and a task whose deadline passes while held ends as
   * one past its deadline. Step timeouts never count held time.
   */
  pausedTimeCounts: z.boolean().optional(),
}).superRefine((budget, ctx) => {
  if (budget.pausedTimeCounts !== undefined && budget.timeout === undefined)
    ctx.addIssue({
      code: 'custom',
      path: ['pausedTimeCounts'],
      message:
        'says whether held time counts against budget.timeout, which is not set: set budget.timeout (seconds), or remove pausedTimeCounts',
    });
});

/** A bearer token by reference: `${VAR}` names an environment variable of the host that calls the agent. */
const SecretRef = z.string().regex(
  /^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/,
  // biome-ignore lint/suspicious/noTemplateCurlyInString: ${VAR} is what the user writes.
  'must name an environment variable as ${VAR} (the token itself never goes in the file)',
);

/**
 * An agent that lives in another system and speaks A2A v1.0: each step is sent to it as a message, and its task's
 * artifacts are the step's output. It has no model, instructions or tools here: its own system decides those.
 */
export const A2aAgentConfig = withExtensions({
  /** The URL of its agent card (e.g. `https://host/.well-known/agent-card.json`). */
  card: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL of the agent card' }),
  /** The bearer token sent with every request, as `${VAR}`; resolved from the host's environment. */
  auth: SecretRef.optional(),
  /** Seconds one request to the agent may take before it counts as a network fault. */
  timeout: z.number().positive().max(600).default(30),
  /** Attempts per request before the step fails (network faults, 429 and 5xx are retried). */
  maxAttempts: z.number().int().min(1).max(20).default(4),
  /** First backoff in seconds; doubles per attempt, jittered. */
  retryDelay: z.number().nonnegative().max(600).default(0.5),
  /** Seconds between reads of the remote task while it works, when the agent cannot stream. */
  pollInterval: z.number().positive().max(600).default(2),
});
export type A2aAgentConfig = z.infer<typeof A2aAgentConfig>;

/** The keys that describe an agent run here, which a remote (`a2a`) agent cannot take. */
const LOCAL_AGENT_KEYS = [
  'model',
  'fallback',
  'stream',
  'output',
  'instructions',
  'tools',
  'permissions',
  'maxTurns',
  'contextTokens',
  'memory',
  'budget',
  'temperature',
  'maxTokens',
] as const;

export const AgentConfig = withExtensions({
  description: z.string().optional(),
  /** An agent in another system, called over A2A; it takes none of the keys below but `approvalTimeout`. */
  a2a: A2aAgentConfig.optional(),
  /** A name under `models:` or `openai:<model>` / `anthropic:<model>`; `defaults.model` when absent. */
  model: ModelRef.optional(),
  /** Models tried in order when the model keeps failing. */
  fallback: z.array(ModelRef).default([]),
  /** Stream replies, published as batched `llm.delta` events. */
  stream: z.boolean().default(false),
  /** A JSON Schema the agent's final reply must match; asked of the provider natively, validated, repaired once. */
  output: z.record(z.string(), z.unknown()).optional(),
  /** Required, unless the agent is remote (`a2a`). */
  instructions: z.string().trim().min(1, 'must not be empty').optional(),
  tools: z.array(z.string().min(1)).default([]),
  permissions: z.array(PermissionRuleConfig).default([]),
  /** The most model calls in one step; `defaults.maxTurns` when absent. */
  maxTurns: z.number().int().positive().max(1_000).optional(),
  /** Estimated tokens the conversation may hold in a step; past it, older turns are summarized by the model. */
  contextTokens: z.number().int().positive().optional(),
  /** Long-term memory: `remember`/`recall` with scope `agent` keep notes across this agent's tasks. */
  memory: withExtensions({ longTerm: z.boolean().default(false) }).optional(),
  /** What this agent may spend over a whole task; checked before each of its model calls. */
  budget: AgentBudgetConfig.optional(),
  /** Seconds a person has to decide on an `ask` call or answer `ask_human`; `defaults.approvalTimeout` when absent. */
  approvalTimeout: z
    .number()
    .positive()
    .max(7 * 86_400)
    .optional(),
  temperature: z.number().min(0).max(2).optional(),
  maxTokens: z.number().int().positive().optional(),
}).superRefine((agent, ctx) => {
  if (agent.a2a === undefined) {
    if (agent.instructions === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['instructions'],
        message:
          'missing: an agent needs instructions (or, for an agent in another system, a2a: { card: <url> })',
      });
    return;
  }
  for (const key of LOCAL_AGENT_KEYS) {
    const value: unknown = agent[key];
    const given = value !== undefined && value !== false && !(Array.isArray(value) && value.length === 0);
    if (given)
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message: `a remote agent (a2a) takes no ${key}: its own system decides that; remove ${key}, or a2a to run the agent here`,
      });
  }
});
export type AgentConfig = z.infer<typeof AgentConfig>;
/** An agent that lives in another system, called over A2A. */
export type RemoteAgentConfig = AgentConfig & { a2a: A2aAgentConfig };
export const isRemoteAgentConfig = (agent: AgentConfig): agent is RemoteAgentConfig =>
  agent.a2a !== undefined;

const StepId = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9_-]{0,62}$/,
    'must be 1-63 characters of a-z, 0-9, "_" and "-", starting with a letter or digit',
  );

/** A CEL expression over `input`, `steps.<id>.output` and `task` (see `expressions.ts`). */
const Expression = z.string().min(1).max(2_000);

/** Where a route may send the flow: a later step of the same list, or `end` (the end of that list). */
const RouteTarget = StepId;

/** What a failed step does: `fail` its list (the task, at the top level), `continue` without it, or jump on. */
const OnError = z.union([z.enum(['fail', 'continue']), RouteTarget]);

/** What every step may say besides its kind. */
const stepBase = {
  id: StepId,
  /** A CEL condition: the step runs only when it is true, and is skipped (`step.skipped`) when it is false. */
  when: Expression.optional(),
  /** Where the flow goes after this step, instead of the step below it: a later step of the same list, or `end`. */
  next: RouteTarget.optional(),
};

/** A step that hands the work to an agent and takes its text reply. */
export const AgentStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('agent'),
  agent: Name,
  /** Which earlier steps' outputs this step sees; all earlier steps when absent. */
  context: z.array(StepId).optional(),
  /** How long the step may take, in seconds, before it fails. */
  timeout: z.number().positive().max(86_400).optional(),
  /** Runs a failed step again, afresh, after `backoff` seconds (doubling each time), at most `max` more times. */
  retry: withExtensions({
    max: z.number().int().min(1).max(10),
    backoff: z.number().nonnegative().max(600).default(1),
  }).optional(),
  /** When the step has failed (its retries too): `fail` (default), `continue` without its output, or a later step. */
  onError: OnError.optional(),
  /** What one run of the step may spend, besides the task's and the agent's budgets. */
  budget: AgentBudgetConfig.optional(),
});

/** A step whose agent returns a verdict: approve moves on, reject sends the work back with feedback. */
export const ReviewStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('review'),
  agent: Name,
  context: z.array(StepId).optional(),
  timeout: z.number().positive().max(86_400).optional(),
  /** The earlier step that reworks the task on reject. */
  onReject: StepId,
  /** How many rounds of work the reviewer may see; a reject in the last round ends the loop. */
  maxRounds: z.number().int().min(1).max(100),
  /** At the bound: `fail` the task (default), or `complete` it with the last work, unapproved. */
  onMaxRounds: z.enum(['fail', 'complete']).default('fail'),
});

/**
 * Branches that run at once, each a list of steps. `join`: `all` needs every branch to succeed, `any` waits for all
 * and needs one, `first` ends with the first to succeed and stops the rest. Its output, for the steps after it, is
 * a JSON object of each branch's last output by branch id.
 */
export const ParallelStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('parallel'),
  branches: z
    .record(
      StepId,
      z.array(z.lazy((): z.ZodType<StepConfig> => StepConfig)).min(1, 'a branch needs at least one step'),
    )
    .refine((b) => Object.keys(b).length >= 2, 'needs at least two branches'),
  join: z.enum(['all', 'any', 'first']).default('all'),
  /**
   * `fail` (default): the step fails as its join says; `continue`: a failed branch is recorded in the output and
   * never fails the step; a later step's id: where the flow goes when the step fails.
   */
  onError: OnError.default('fail'),
});

/**
 * Picks the next step: from a value (`on`, a CEL expression, matched against `cases`; else `default`), or by a
 * router agent (`agent`), whose model chooses one of `targets` through structured output.
 */
export const RouteStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('route'),
  on: Expression.optional(),
  cases: z
    .record(z.string().min(1).max(200), RouteTarget)
    .refine((c) => Object.keys(c).length > 0, 'needs at least one case')
    .optional(),
  /** Where the flow goes when no case matches; without it, no match fails the task. */
  default: RouteTarget.optional(),
  /** The router agent: its model picks one of `targets`, saying why. */
  agent: Name.optional(),
  /** The targets a router agent may pick, each with what it is for (the model reads it). */
  targets: z
    .record(RouteTarget, z.string().min(1).max(1_000))
    .refine((t) => Object.keys(t).length >= 2, 'needs at least two targets to choose from')
    .optional(),
  /** Which earlier steps' outputs the router agent sees; all earlier steps when absent. */
  context: z.array(StepId).optional(),
  /** How long the router agent may take, in seconds. */
  timeout: z.number().positive().max(86_400).optional(),
});

/**
 * Asks a person mid-flow and waits: `prompt` is put to them as a question (`troupe answer`, the gateway), and the
 * answer is the step's output.
 */
export const HumanStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('human'),
  prompt: z.string().min(1).max(10_000),
  /** A JSON Schema the answer must match (as JSON); a mismatch asks again, saying why, at most three times. */
  answer: z.record(z.string(), z.unknown()).optional(),
  /** Seconds a person has to answer; `defaults.approvalTimeout` when absent. */
  timeout: z
    .number()
    .positive()
    .max(30 * 86_400)
    .optional(),
  /** When nobody answers in time: `fail` the task, `continue` with no answer, or go to a later step. */
  onTimeout: OnError.default('fail'),
  /** When the answers kept missing `answer`: as for an agent step. */
  onError: OnError.optional(),
});

/**
 * Runs another pipeline as a step: a task of its own (`<task>-<step>-<round>`), linked to this one by its `parent`,
 * whose result is the step's output. Pipelines nest at most `MAX_PIPELINE_DEPTH` deep.
 */
export const PipelineStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('pipeline'),
  /** The pipeline to run: any pipeline a coordinator on this NATS has loaded. */
  pipeline: Name,
  /** The sub-task's goal; this task's goal when absent. */
  goal: z.string().min(1).max(100_000).optional(),
  /** Which earlier steps' outputs the sub-task gets as `input.context`; all earlier steps when absent. */
  context: z.array(StepId).optional(),
  /** How long the sub-task may take, in seconds; `defaults.stepTimeout` when absent. */
  timeout: z
    .number()
    .positive()
    .max(7 * 86_400)
    .optional(),
  onError: OnError.optional(),
});

/**
 * Runs its `do` steps once for each item of a list an earlier step produced (`items`, a CEL expression), each item
 * in a workflow of its own, `concurrency` at a time. `maxItems` bounds the list: a longer one fails the step. Its
 * output, for the steps after it, is a JSON array of each item's result in the order of the list.
 */
export const ForeachStepConfig = withExtensions({
  ...stepBase,
  kind: z.literal('foreach'),
  /** A CEL expression giving the list, e.g. `steps.plan.output.parts`. */
  items: Expression,
  /** The most items the step runs; a list longer than this fails the step rather than running part of it. */
  maxItems: z.number().int().min(1).max(1_000),
  /** How many items run at once. */
  concurrency: z.number().int().min(1).max(100).default(4),
  /**
   * Whether the first failed item stops the others and fails the step at once; by default it does, unless
   * `onError: continue`. Without it, every item runs and the step fails at the end if one did.
   */
  failFast: z.boolean().optional(),
  /** The steps each item runs: they see the item as `input.item` (and its place in the list as `input.index`). */
  do: z.array(z.lazy((): z.ZodType<StepConfig> => StepConfig)).min(1, 'needs at least one step'),
  /**
   * `fail` (default): a failed item fails the step; `continue`: failed items are in the output as
   * `{"error": ...}` and never fail the step; a later step's id: where the flow goes when the step fails.
   */
  onError: OnError.default('fail'),
});

export const StepConfig = z.discriminatedUnion('kind', [
  AgentStepConfig,
  ReviewStepConfig,
  ParallelStepConfig,
  RouteStepConfig,
  HumanStepConfig,
  PipelineStepConfig,
  ForeachStepConfig,
]);
export type StepConfig =
  | AgentStepConfig
  | ReviewStepConfig
  | ParallelStepConfig
  | RouteStepConfig
  | HumanStepConfig
  | PipelineStepConfig
  | ForeachStepConfig;
export type PipelineStepConfig = z.infer<typeof PipelineStepConfig>;
export type HumanStepConfig = z.infer<typeof HumanStepConfig>;
export type AgentStepConfig = z.infer<typeof AgentStepConfig>;
export type ReviewStepConfig = z.infer<typeof ReviewStepConfig>;
/** Written out, since a parallel step holds steps: its type cannot be inferred from its own schema. */
export interface ParallelStepConfig {
  id: string;
  when?: string | undefined;
  next?: string | undefined;
  kind: 'parallel';
  branches: Record<string, StepConfig[]>;
  join: 'all' | 'any' | 'first';
  onError: string;
  [extension: `x-${string}`]: unknown;
}
/** Written out, like {@link ParallelStepConfig}: a foreach step holds steps. */
export interface ForeachStepConfig {
  id: string;
  when?: string | undefined;
  next?: string | undefined;
  kind: 'foreach';
  items: string;
  maxItems: number;
  concurrency: number;
  failFast?: boolean | undefined;
  do: StepConfig[];
  onError: string;
  [extension: `x-${string}`]: unknown;
}
export type RouteStepConfig = z.infer<typeof RouteStepConfig>;
/** A step that hands work to an agent. */
export type AgentWorkStep = AgentStepConfig | ReviewStepConfig;
/** A step whose agent is asked something: work, a verdict, or a router's choice. */
export type AgentAskedStep = AgentWorkStep | (RouteStepConfig & { agent: string });

export const DefaultsConfig = withExtensions({
  model: ModelRef.optional(),
  maxTurns: z.number().int().positive().max(1_000).default(10),
  /** Default step timeout in seconds. */
  stepTimeout: z.number().positive().max(86_400).default(600),
  /** Seconds a person has to decide on an approval or answer a question before the call is denied. */
  approvalTimeout: z
    .number()
    .positive()
    .max(7 * 86_400)
    .default(300),
});

/** How the gateway's sessions on this pipeline are kept. */
export const SessionsConfig = withExtensions({
  /**
   * The agent whose model folds a session's older turns into its running summary; the agent of the first step
   * when absent. A cheap model is enough: it only condenses goals and results.
   */
  summarizer: Name.optional(),
});

export const WorkspaceConfig = withExtensions({
  /**
   * Hand each task's workspace files between its steps through the pipeline's object store, so a step on another
   * host (a `troupe worker` elsewhere, or a step resumed there) sees the files earlier steps wrote. Off by default:
   * with every agent on one host the files are on its disk already.
   */
  handOff: z.boolean().default(false),
});

/** A tool module's path: relative to the pipeline file (or absolute), TypeScript or JavaScript. */
const ToolModulePath = z
  .string()
  .regex(/^(\.\.?\/|\/)/, 'a tool module is a path starting with ./ or ../ (relative to this file), or /')
  .regex(/\.(ts|mts|js|mjs)$/, 'a tool module is a .ts, .mts, .js or .mjs file');

/** Tools of one's own, from modules the stock `troupe up` and `troupe worker` load (docs/tools.md). */
export const ToolsConfig = withExtensions({
  /** Files whose exports are tools; agents of this pipeline may then declare those tools by name. */
  modules: z.array(ToolModulePath).min(1, 'name at least one module, or leave tools out').max(100),
});

/**
 * A scorer of the `evals:` block: a {@link ScorerSpec} whose unknown keys are refused (a misspelt `threshold` would
 * otherwise be dropped in silence), `x-` keys aside, as everywhere in the file.
 */
const EvalScorerConfig = z.discriminatedUnion(
  'type',
  ScorerSpec.options.map((option) => withExtensions(option.shape)) as unknown as typeof ScorerSpec.options,
);

/** Online scoring (docs/evals.md): a sample of the pipeline's tasks is scored as each ends. */
export const EvalsConfig = withExtensions({
  /** The share of tasks scored, 0 to 1, decided by each task's id (the same on every coordinator). */
  sample: z.number().min(0).max(1).default(1),
  scorers: z.array(EvalScorerConfig).min(1, 'name at least one scorer, or leave evals out').max(50),
});
export type EvalsConfig = z.infer<typeof EvalsConfig>;

/** A pipeline file. */
export const PipelineConfig = withExtensions({
  version: z.literal(1),
  name: Name,
  description: z.string().optional(),
  models: z.record(Name, ModelConfig).default({}),
  /** What one task may spend, all agents together; exceeding it ends the task with `budget_exceeded`. */
  budget: TaskBudgetConfig.optional(),
  /** MCP servers whose tools agents may declare as `<server>.<tool>`. */
  mcpServers: z.record(Name, McpServerConfig).default({}),
  /** Tools of one's own: the modules that provide them, which agents may then declare by name. */
  tools: ToolsConfig.optional(),
  /** Price overrides, by `provider:model`. */
  prices: z.record(z.string().regex(/^[a-z-]+:.+$/, 'must be provider:model'), PriceConfig).default({}),
  defaults: DefaultsConfig.prefault({}),
  /**
   * A JSON Schema the task's `input` must match (an object's): a task whose input does not is refused before it
   * runs. It is the input schema the A2A agent card, the MCP tool and the gateway show. Any object when absent.
   */
  input: z.record(z.string(), z.unknown()).optional(),
  agents: z.record(Name, AgentConfig),
  flow: z.array(StepConfig).min(1, 'needs at least one step'),
  sessions: SessionsConfig.optional(),
  /** How a task's workspace files reach its steps on other hosts. */
  workspace: WorkspaceConfig.optional(),
  /** Scorers that score a sample of the pipeline's tasks as they end (`eval.scored` events and metrics). */
  evals: EvalsConfig.optional(),
});
export type PipelineConfig = z.infer<typeof PipelineConfig>;

/**
 * The agent that summarizes the pipeline's sessions: the one named under `sessions`, else the first step's that has
 * a local agent, else the first local one declared; none in a pipeline without local agents.
 */
export const sessionSummarizer = (config: PipelineConfig): string | undefined => {
  if (config.sessions?.summarizer) return config.sessions.summarizer;
  // A remote agent has no model here to summarize with.
  const local = (name: string) =>
    config.agents[name] !== undefined && !isRemoteAgentConfig(config.agents[name]);
  return (
    agentSteps(config.flow)
      .map((s) => s.agent)
      .find(local) ?? Object.keys(config.agents).find(local)
  );
};
