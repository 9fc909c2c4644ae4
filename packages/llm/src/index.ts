export { ModelError, type ModelErrorCode } from './errors.ts';
export { loadScript, parseScript } from './scripted/loadScript.ts';
export { Script, ScriptedToolCall, ScriptedTurn } from './scripted/script.ts';
export { ScriptedProvider } from './scripted/scriptedProvider.ts';
export type {
  CallContext,
  ChatMessage,
  FinishReason,
  JsonSchema,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ToolCall,
  ToolDefinition,
  Usage,
} from './types.ts';
export { addUsage, zeroUsage } from './types.ts';
export type { ModelDelta, ModelObserver, RetryInfo, FallbackInfo } from './types.ts';
export { OpenAIProvider, type OpenAIProviderOptions } from './openai/openaiProvider.ts';
export { AnthropicProvider, type AnthropicProviderOptions } from './anthropic/anthropicProvider.ts';
export {
  ResilientModel,
  DEFAULT_RETRY_POLICY,
  type RetryPolicy,
  type ResilientModelOptions,
} from './resilience/resilientModel.ts';
export { PriceTable, DEFAULT_PRICES, type ModelPrice } from './pricing/priceTable.ts';
export { toModelError } from './sdkErrors.ts';
