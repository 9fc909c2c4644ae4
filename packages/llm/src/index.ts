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
