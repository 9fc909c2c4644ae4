import type { ServerContext } from '@modelcontextprotocol/server';
import type { TroupeEvent } from '@troupe/protocol';

/**
 * Tells the caller how its call goes, as MCP progress notifications: only when its request carried a
 * `progressToken`, and always with a larger `progress` than the last (the count goes on across the rounds of a call
 * that asked the user something, since a round starts where the last left off).
 */
export class ProgressReporter {
  readonly #ctx: ServerContext;
  readonly #token: string | number | undefined;
  #count: number;

  constructor(ctx: ServerContext, from = 0) {
    this.#ctx = ctx;
    this.#token = ctx.mcpReq._meta?.progressToken;
    this.#count = from;
  }

  /** How many notifications the call has had, to carry into its next round. */
  get count(): number {
    return this.#count;
  }

  async say(message: string): Promise<void> {
    if (this.#token === undefined) return;
    this.#count += 1;
    // A caller that has gone is no reason to fail the task's call: its cancel is handled on its own.
    await this.#ctx.mcpReq
      .notify({
        method: 'notifications/progress',
        params: { progressToken: this.#token, progress: this.#count, message },
      })
      .catch(() => undefined);
  }

  /** A line for the events worth a caller's attention; the rest (model calls, deltas, tools) pass silently. */
  async event(event: TroupeEvent): Promise<void> {
    const line = describe(event);
    if (line) await this.say(line);
  }
}

function describe(event: TroupeEvent): string | undefined {
  switch (event.kind) {
    case 'task.accepted':
      return `task ${event.taskId} accepted by ${event.pipeline}`;
    case 'task.resumed':
      return `task ${event.taskId} resumed`;
    case 'step.started':
      return `step ${event.data.step} started (agent ${event.data.agent})`;
    case 'step.completed':
      return `step ${event.data.step} ${event.data.ok ? 'done' : `failed${event.data.error ? `: ${event.data.error.message}` : ''}`}`;
    case 'agent.handoff':
      return `handoff ${event.from ?? 'task'} → ${event.to ?? 'next step'} (${event.data.reason})`;
    case 'approval.decided':
      return `approval ${event.data.approvalId}: ${event.data.decision}${event.data.by ? ` by ${event.data.by}` : ''}`;
    case 'human.answered':
      return `question ${event.data.questionId} answered${event.data.by ? ` by ${event.data.by}` : ''}`;
    case 'task.completed':
      return `task ${event.taskId} completed`;
    case 'task.failed':
      return `task ${event.taskId} failed (${event.data.reason}): ${event.data.message}`;
    case 'task.cancelled':
      return `task ${event.taskId} cancelled${event.data.reason ? `: ${event.data.reason}` : ''}`;
    default:
      return undefined;
  }
}
