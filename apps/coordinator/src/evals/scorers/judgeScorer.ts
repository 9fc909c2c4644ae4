import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { ModelProvider } from '@troupe/llm';
import type { ScorerSpec } from '@troupe/protocol';
import type { LoadedPipeline } from '../../config/loadPipeline.ts';
import { createProvider, type FileSource, keyEnvOf, withRetries } from '../../config/modelFactory.ts';
import type { ModelConfig } from '../../config/pipelineSchema.ts';
import type { CaseRun, ScoreContext } from '../evalTypes.ts';
import { type Check, CheckError, type CheckOptions, type Finding, parseJsonText, quoted } from './check.ts';

type Spec = Extract<ScorerSpec, { type: 'judge' }>;

const INSTRUCTIONS = [
  'You grade the result of a task done by an AI agent pipeline, against a rubric.',
  'Read the rubric, the task, the expected output when one is given, and the output.',
  'Answer with one JSON object and nothing else: {"score": <a number from 0 to 1>, "reason": "<one or two sentences>"}.',
].join(' ');

/**
 * An LLM judge: the pipeline's model `spec.model` grades the run's output against the rubric, from 0 to 1. Retries
 * are the model entry's (`maxAttempts`, `retryDelay`); what its calls cost is the score's `costUsd`, apart from the
 * task's. A reply that is not `{"score", "reason"}` (bare JSON or in a code fence) is an error score quoting it.
 */
export function judgeCheck(spec: Spec, options: CheckOptions): Check {
  if (options.pipeline) modelOf(spec, options.pipeline);
  const providers = new WeakMap<LoadedPipeline, Promise<ModelProvider>>();
  return async (run, context) => {
    const model = modelOf(spec, context.pipeline);
    const env = context.env ?? process.env;
    const keyEnv = keyEnvOf(model);
    if (keyEnv !== undefined && !env[keyEnv]) {
      throw new Error(`model ${spec.model} needs the environment variable ${keyEnv}; it is not set`);
    }
    let provider = providers.get(context.pipeline);
    if (!provider) {
      provider = built(model, context.pipeline, env);
      providers.set(context.pipeline, provider);
    }
    return judged(spec, model, await provider, run, context);
  };
}

async function judged(
  spec: Spec,
  model: ModelConfig,
  provider: ModelProvider,
  run: CaseRun,
  context: ScoreContext,
): Promise<Finding> {
  const response = await provider.complete({
    messages: [
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: promptOf(spec, run) },
    ],
    tools: [],
    ...(model.provider !== 'scripted' && model.temperature !== undefined
      ? { temperature: model.temperature }
      : {}),
    context: {
      taskId: run.taskId,
      pipeline: context.pipeline.config.name,
      agent: 'judge',
      stepId: `${run.taskId}.judge`,
    },
    ...(context.signal ? { signal: context.signal } : {}),
  });
  const costUsd = context.pipeline.prices.cost(
    response.provider ?? provider.provider,
    response.model,
    response.usage,
  );
  const verdict = verdictOf(response.content);
  if (!verdict) {
    throw new CheckError(
      `the judge did not answer {"score": 0..1, "reason": "…"}; it answered ${quoted(response.content, 300)}`,
      costUsd,
    );
  }
  return { ...verdict, costUsd };
}

function promptOf(spec: Spec, run: CaseRun): string {
  const output =
    run.output === undefined ? `(none: the task ${run.status})` : run.output === '' ? '(empty)' : run.output;
  return [
    `# Rubric\n${spec.rubric}`,
    `# Task\n${run.case.goal}`,
    ...(run.case.expected === undefined ? [] : [`# Expected output\n${run.case.expected}`]),
    `# Output\n${output}`,
  ].join('\n\n');
}

/** The score and reason of a judge's reply: JSON alone, or in a code fence anywhere in it. */
function verdictOf(content: string): { value: number; reason: string } | undefined {
  const fenced = /```[a-zA-Z]*\s*\n?([\s\S]*?)```/.exec(content)?.[1];
  const parsed = parseJsonText(content) ?? (fenced === undefined ? undefined : parseJsonText(fenced));
  const reply = parsed?.value as { score?: unknown; reason?: unknown } | null | undefined;
  if (typeof reply !== 'object' || reply === null) return undefined;
  const { score, reason } = reply;
  if (typeof score !== 'number' || !(score >= 0 && score <= 1)) return undefined;
  return { value: score, reason: typeof reason === 'string' && reason !== '' ? reason : '(no reason given)' };
}

function modelOf(spec: Spec, pipeline: LoadedPipeline): ModelConfig {
  const model = pipeline.config.models[spec.model];
  if (model) return model;
  const names = Object.keys(pipeline.config.models);
  const known = names.length === 0 ? 'it has none' : `it has ${names.join(', ')}`;
  throw new Error(
    `model ${spec.model} is not under the models: of pipeline ${pipeline.config.name} (${known})`,
  );
}

/** The judge's model as an agent's is built: its provider (a script read next to the pipeline file), with retries. */
async function built(
  model: ModelConfig,
  pipeline: LoadedPipeline,
  env: Readonly<Record<string, string | undefined>>,
): Promise<ModelProvider> {
  const files: FileSource = async (path) => {
    const source = resolve(dirname(resolve(pipeline.file)), path);
    return { text: await readFile(source, 'utf8'), source };
  };
  return withRetries(model, [await createProvider(model, files, env)]);
}
