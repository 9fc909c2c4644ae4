export { AnthropicProvider, type AnthropicProviderOptions } from './anthropic/anthropicProvider.ts';
export { ModelError, type ModelErrorCode } from './errors.ts';
export { OpenAIProvider, type OpenAIProviderOptions } from './openai/openaiProvider.ts';
export { DEFAULT_PRICES, type ModelPrice, PriceTable } from './pricing/priceTable.ts';
export {
  DEFAULT_RETRY_POLICY,
  ResilientModel,
  type ResilientModelOptions,
  type RetryPolicy,
} from './resilience/resilientModel.ts';
export { loadScript, parseScript } from './scripted/loadScript.ts';
export { Script, ScriptedToolCall, ScriptedTurn } from './scripted/script.ts';
export { ScriptedProvider } from './scripted/scriptedProvider.ts';
export { toModelError } from './sdkErrors.ts';
export type {
  CacheSetting,
  CacheTtl,
  CallContext,
  ChatMessage,
  FallbackInfo,
  FinishReason,
  JsonSchema,
  ModelDelta,
  ModelObserver,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  RetryInfo,
  ToolCall,
  ToolDefinition,
  Usage,
} from './types.ts';
export { addUsage, zeroUsage } from './types.ts';
