export type {
  JsonSchema,
  ToolDefinition,
  ToolCall,
  ChatMessage,
  Usage,
  FinishReason,
  CallContext,
  ModelRequest,
  ModelResponse,
  ModelProvider,
} from './types.ts';
export { zeroUsage, addUsage } from './types.ts';
export { ModelError, type ModelErrorCode } from './errors.ts';
export { Script, ScriptedTurn, ScriptedToolCall } from './scripted/script.ts';
export { ScriptedProvider } from './scripted/scriptedProvider.ts';
export { loadScript, parseScript } from './scripted/loadScript.ts';
