import type { PermissionRule } from '../../src/tools/policy.ts';
import type { Tool, ToolContext } from '../../src/tools/tool.ts';
import { ToolError } from '../../src/tools/toolError.ts';

/** A context like the executor builds, for calling a tool directly. */
export function contextFor(
  workspace: string,
  extra: { rule?: PermissionRule; signal?: AbortSignal } = {},
): ToolContext {
  return {
    workspace,
    taskId: 'task-1',
    agent: 'coder',
    callId: 'call-1',
    signal: extra.signal ?? new AbortController().signal,
    ...(extra.rule ? { rule: extra.rule } : {}),
  };
}

/** Runs a tool the way the executor does: arguments through the schema first. */
export async function call<I>(
  tool: Tool<I>,
  workspace: string,
  args: unknown,
  extra: { rule?: PermissionRule; signal?: AbortSignal } = {},
): Promise<string> {
  return tool.run(await tool.input.parseAsync(args), contextFor(workspace, extra));
}

/** The `ToolError` a promise rejects with; fails the test on success or another error. */
export async function failure(promise: Promise<unknown>): Promise<ToolError> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  if (!(error instanceof ToolError)) throw new Error(`expected a ToolError, got ${String(error)}`);
  return error;
}
