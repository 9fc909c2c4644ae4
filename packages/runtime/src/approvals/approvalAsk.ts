/** A tool call waiting for a person's approval: what the agent asks the human gate about. */
export interface ApprovalAsk {
  callId: string;
  /** The call's position among the turn's calls. */
  index: number;
  tool: string;
  arguments: string;
  reason: string;
}
