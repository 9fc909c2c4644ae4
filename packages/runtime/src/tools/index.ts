export {
  type BubblewrapProbe,
  type BubblewrapSandboxOptions,
  createBubblewrapSandbox,
  probeBubblewrap,
} from '../sandbox/bubblewrapSandbox.ts';
export { createProcessSandbox, type ProcessSandboxOptions } from '../sandbox/processSandbox.ts';
export {
  minimalEnv,
  type ResourceLimits,
  type Sandbox,
  type SandboxKind,
  type SandboxResult,
  type SandboxRunOptions,
} from '../sandbox/sandbox.ts';
export { type SelectSandboxOptions, selectSandbox } from '../sandbox/selectSandbox.ts';
export { builtinToolList } from './builtinTools.ts';
export { type CommandToolOptions, createCommandTool, runCommandTool } from './commandTool.ts';
export {
  editFileTool,
  fileTools,
  listFilesTool,
  readFileTool,
  searchFilesTool,
  writeFileTool,
} from './fileTools.ts';
export { httpFetchTool } from './httpTool.ts';
export {
  type AgentPolicy,
  evaluatePolicy,
  type PermissionRule,
  type PolicyContext,
  type PolicyVerdict,
} from './policy.ts';
export type { ToolProgressUpdate } from './progressThrottle.ts';
export { defineTool, type Tool, type ToolContext, type ToolProgress, type ToolSpec } from './tool.ts';
export { ToolError, type ToolErrorCode } from './toolError.ts';
export {
  type CallCheck,
  ToolExecutor,
  type ToolExecutorOptions,
} from './toolExecutor.ts';
export { ToolRegistry } from './toolRegistry.ts';
export { type ResolveOptions, resolveInWorkspace } from './workspace.ts';
