import { duration } from './format.ts';

/**
 * What a person did to a running task, as the trace places it in the flow (packages/client's trace): held it, let it
 * go on after a hold, or told it something.
 */
export type SteeringNode =
  | { kind: 'paused'; at: string; state: string; round: number; by?: string; reason?: string }
  | { kind: 'resumed'; at: string; state: string; round: number; by?: string; pausedMs?: number }
  | { kind: 'told'; at: string; messageId: string; text: string; by?: string };

/** A step's agent read told messages into its conversation, before model call `turn`. */
export interface ToldEntry {
  kind: 'told';
  at: string;
  turn: number;
  messages: { id: string; text?: string }[];
}

/** One line for a hold, a resume or a told message in the timeline. */
export function steeringText(node: SteeringNode): string {
  const by = node.by ? ` by ${node.by}` : '';
  switch (node.kind) {
    case 'paused':
      return `paused${by} at ${node.state}${node.reason ? `: ${node.reason}` : ''}`;
    case 'resumed':
      return `resumed${by} at ${node.state}${node.pausedMs === undefined ? '' : ` after ${duration(node.pausedMs)} paused`}`;
    case 'told':
      return `told ${node.messageId}${by}: ${node.text}`;
  }
}

/** One line for what an agent read of the told messages, before which model call. */
export function toldEntryText(entry: ToldEntry): string {
  const read = entry.messages.map((m) => (m.text === undefined ? m.id : `${m.id} “${m.text}”`)).join(', ');
  return `read ${read} before turn ${entry.turn}`;
}

const STEERING: ReadonlySet<string> = new Set(['paused', 'resumed', 'told']);

/** Whether a node of the flow is a person's hold, resume or message, rather than the flow's own. */
export const isSteering = (node: { kind: string }): node is SteeringNode => STEERING.has(node.kind);
