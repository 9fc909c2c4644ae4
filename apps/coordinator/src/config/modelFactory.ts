import {
  AnthropicProvider,
  type CacheSetting,
  type ModelProvider,
  OpenAIProvider,
  parseScript,
  ResilientModel,
  ScriptedProvider,
} from '@troupe/llm';
import { type Logger, registerSecret } from '@troupe/runtime';
import type { ModelConfig, PipelineConfig } from './pipelineSchema.ts';

/** The environment the API keys are read from. */
export type Env = Readonly<Record<string, string | undefined>>;

/** The key variable each provider reads unless the entry names another. */
export const DEFAULT_KEY_ENV = { openai: 'OPENAI_API_KEY', anthropic: 'ANTHROPIC_API_KEY' } as const;

const INLINE_DEFAULTS = { timeout: 120, maxAttempts: 4, retryDelay: 0.5 };

/** The entry a model reference means: a name under `models:`, or an inline `openai:<model>` / `anthropic:<model>`. */
export function resolveModelRef(config: PipelineConfig, ref: string): ModelConfig | undefined {
  const colon = ref.indexOf(':');
  if (colon === -1) return config.models[ref];
  const provider = ref.slice(0, colon);
  const model = ref.slice(colon + 1);
  if (provider !== 'openai' && provider !== 'anthropic') return undefined;
  return { provider, model, ...INLINE_DEFAULTS };
}

/** The environment variable a model needs for its API key, if any. */
export function keyEnvOf(model: ModelConfig): string | undefined {
  switch (model.provider) {
    case 'scripted':
      return undefined;
    case 'openai':
    case 'anthropic':
      return model.apiKeyEnv ?? DEFAULT_KEY_ENV[model.provider];
    case 'openai-compatible':
      return model.apiKeyEnv;
  }
}

/** `provider:model`, as events and messages name a model. */
export const modelLabel = (model: ModelConfig): string => `${model.provider}:${model.model}`;

/**
 * The text of a file a pipeline refers to, by the path it names it with: read next to the pipeline file, or taken
 * from a stored version of the pipeline. Throws a `ModelError` saying why when there is none.
 */
export type FileSource = (path: string) => Promise<{ text: string; source: string }>;

/** A remote entry's prompt caching, as its provider takes it: `auto` when the entry says nothing. */
export function cacheSettingOf(model: Exclude<ModelConfig, { provider: 'scripted' }>): CacheSetting {
  const { cache } = model;
  if (cache === undefined) return 'auto';
  // Only the lifetime: the entry's own `x-` keys stay in the file.
  return typeof cache === 'string' ? cache : { ttl: cache.ttl };
}

/**
 * Builds the provider for one entry; a scripted model's script comes from `files`. What a provider has to warn about
 * (a server that refused the prompt-cache fields) goes to `logger`, with the entry's provider and model; without
 * one, to a Node process warning.
 */
export async function createProvider(
  model: ModelConfig,
  files: FileSource,
  env: Env,
  logger?: Pick<Logger, 'warn'>,
): Promise<ModelProvider> {
  const keyEnv = keyEnvOf(model);
  const apiKey = keyEnv === undefined ? undefined : env[keyEnv];
  // A provider's error may quote the key it was given: it is redacted wherever it appears.
  registerSecret(apiKey);
  switch (model.provider) {
    case 'scripted': {
      const { text, source } = await files(model.script);
      return new ScriptedProvider(parseScript(text, source), model.model);
    }
    case 'openai':
    case 'openai-compatible':
      return new OpenAIProvider({
        provider: model.provider,
        model: model.model,
        // Local servers mostly take no key, but the SDK insists on one.
        apiKey: apiKey ?? 'not-needed',
        timeoutMs: model.timeout * 1_000,
        cache: cacheSettingOf(model),
        ...(model.baseURL === undefined ? {} : { baseURL: model.baseURL }),
        ...(logger === undefined
          ? {}
          : { onWarning: (message: string) => logger.warn({ model: modelLabel(model) }, message) }),
      });
    case 'anthropic':
      return new AnthropicProvider({
        model: model.model,
        apiKey: apiKey ?? '',
        timeoutMs: model.timeout * 1_000,
        cache: cacheSettingOf(model),
        ...(model.maxTokens === undefined ? {} : { defaultMaxTokens: model.maxTokens }),
        ...(model.baseURL === undefined ? {} : { baseURL: model.baseURL }),
      });
  }
}

/** An agent's model: its primary with retries, then its fallbacks in order. */
export function withRetries(primary: ModelConfig, chain: readonly ModelProvider[]): ModelProvider {
  const [first, ...fallbacks] = chain;
  if (!first) throw new Error('an agent needs at least one model');
  if (primary.provider === 'scripted')
    return fallbacks.length === 0 ? first : new ResilientModel(first, fallbacks);
  return new ResilientModel(first, fallbacks, {
    policy: { maxAttempts: primary.maxAttempts, baseDelayMs: primary.retryDelay * 1_000 },
  });
}
