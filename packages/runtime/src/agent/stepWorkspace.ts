import { type AgentStepReply, type AgentStepRequest, errorMessage } from '@troupe/protocol';
import { ValueStoreError } from '../durable/valueStoreError.ts';
import { WorkspaceLimitError } from '../workspace/workspaceLimits.ts';
import type { WorkspaceSync } from '../workspace/workspaceSync.ts';
import type { StepContext } from './stepContext.ts';
import { failedReply } from './stepReply.ts';

/**
 * The reply with what the step changed in its task's workspace, stored first, whether the step succeeded or not (a
 * retry goes on from the files a failed run left). A workspace past a limit fails a step that succeeded with
 * `workspace_too_large`; one that cannot be stored fails it `journal_unavailable`, so it is sent again. A failed
 * step keeps its own error, which says what was not handed on.
 */
export async function handOnWorkspace(
  { request, deps }: StepContext,
  sync: WorkspaceSync,
  reply: AgentStepReply,
): Promise<AgentStepReply> {
  try {
    const workspace = await sync.push(request.pipeline, request.taskId, request.workspace);
    return workspace ? { ...reply, workspace } : reply;
  } catch (error) {
    const tooLarge = error instanceof WorkspaceLimitError;
    const why = tooLarge
      ? errorMessage(error)
      : `cannot store the workspace files of step ${request.stepId}: ${errorMessage(error)}`;
    deps.logger?.error({ err: error, stepId: request.stepId }, why);
    if (!reply.ok) {
      return { ...reply, error: { ...reply.error, message: `${reply.error.message}; and ${why}` } };
    }
    const failed = failedReply(request.stepId, tooLarge ? 'workspace_too_large' : 'journal_unavailable', why);
    return { ...failed, usage: reply.usage, turns: reply.turns };
  }
}

/**
 * The reply of a step whose workspace files cannot be brought here: sent again later unless a file is gone for good
 * (its bucket's retention removed it) or the workspace cannot take it.
 */
export function unpulledWorkspaceReply(request: AgentStepRequest, error: unknown): AgentStepReply {
  const retry = ValueStoreError.is(error, 'value_unavailable');
  return failedReply(
    request.stepId,
    retry ? 'journal_unavailable' : 'failed',
    `cannot bring the task's workspace files here for step ${request.stepId}: ${errorMessage(error)}`,
  );
}
