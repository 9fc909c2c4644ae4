import type { AgentStepReply } from '@troupe/protocol';

/** How many recent step replies a host keeps for resends. */
const RECENT_REPLIES = 1_000;

/**
 * The replies of steps that ended on this host lately, for a resend whose first reply was lost to a reconnect: it
 * gets the reply that run gave rather than running the step twice. The oldest are forgotten first.
 */
export class RecentReplies {
  readonly #replies = new Map<string, Promise<AgentStepReply>>();
  readonly #limit: number;

  constructor(limit = RECENT_REPLIES) {
    this.#limit = limit;
  }

  remember(stepId: string, reply: Promise<AgentStepReply>): void {
    this.#replies.set(stepId, reply);
    if (this.#replies.size > this.#limit) this.#replies.delete(this.#replies.keys().next().value as string);
  }

  /** The reply the step gave here lately, if it is still remembered. */
  of(stepId: string): Promise<AgentStepReply> | undefined {
    return this.#replies.get(stepId);
  }
}
