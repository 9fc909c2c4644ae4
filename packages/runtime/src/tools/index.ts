export { fileTools, listFilesTool, readFileTool, writeFileTool } from './fileTools.ts';
export {
  type AgentPolicy,
  type Decision,
  evaluatePolicy,
  type PermissionRule,
  type PolicyContext,
  type PolicyVerdict,
} from './policy.ts';
export { defineTool, type Tool, type ToolContext, type ToolSpec } from './tool.ts';
export { ToolError, type ToolErrorCode } from './toolError.ts';
export {
  type ApprovalOutcome,
  type CallCheck,
  type ToolCallResult,
  ToolExecutor,
  type ToolExecutorOptions,
} from './toolExecutor.ts';
export { ToolRegistry } from './toolRegistry.ts';
export { type ResolveOptions, resolveInWorkspace } from './workspace.ts';
