import type Anthropic from '@anthropic-ai/sdk';
import type { CacheTtl } from '../types.ts';

type Message = Anthropic.Messages.MessageParam;
type Block = Anthropic.Messages.ContentBlockParam;
type Tool = Anthropic.Messages.Tool;
type TextBlock = Anthropic.Messages.TextBlockParam;
type CacheControl = Anthropic.Messages.CacheControlEphemeral;

/**
 * The API looks for an earlier cached prefix at most 20 blocks before a breakpoint. A last turn that added more
 * blocks than this (20 less a margin, since how the API counts blocks is not specified to the block) gets a
 * breakpoint where the previous call ended as well, so that call's cache entry is still read.
 */
export const LOOKBACK_REACH = 16;

/** A prompt as the Messages API takes it, before any cache markers. */
export interface AnthropicPrompt {
  /** The agent's tools, then the structured-output tool if the request has one. */
  tools: Tool[];
  /** Whether the agent has tools of its own (beyond the structured-output tool), so may call the model again. */
  agentTools: boolean;
  system: string;
  messages: Message[];
}

/** The same prompt with breakpoints: the system, when there is one, as a text block that can carry a marker. */
export interface MarkedPrompt {
  tools: Tool[];
  system: TextBlock[] | undefined;
  messages: Message[];
}

/**
 * Marks where the prompt's cacheable prefixes end (the API's prefix order is tools, system, messages): the last
 * tool definition (the agent's tools, the same for every call of the agent), the system prompt (with the tools,
 * the same for every task of the agent), the conversation's last block (so the next call reads this call's
 * prefix), and, after a turn longer than the lookback, the block where the previous call ended: at most 4, the
 * API's limit (it refuses a fifth). An agent without tools of its own (a reviewer) makes one call a step, which no
 * later call reads: only the prefix its tasks share is marked, at the system prompt (else the last tool), as a
 * write at the conversation's end would cost 1.25 × for nothing.
 * Every breakpoint gets the same lifetime, so a 1-hour one never follows a 5-minute one, which the API refuses;
 * the 5-minute one is the bare `{ type: 'ephemeral' }`, which proxies that predate `ttl` take too.
 * Nothing but the markers changes: the system text is one block with the text it had.
 *
 * @example
 * const marked = markCacheBreakpoints({ tools, agentTools: true, system: 'Be brief.', messages }, '5m');
 * marked.system; // [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }]
 */
export function markCacheBreakpoints(prompt: AnthropicPrompt, ttl: CacheTtl): MarkedPrompt {
  const marker: CacheControl = ttl === '1h' ? { type: 'ephemeral', ttl } : { type: 'ephemeral' };
  const system =
    prompt.system === ''
      ? undefined
      : [{ type: 'text' as const, text: prompt.system, cache_control: marker }];
  const markLastTool = prompt.agentTools || system === undefined;
  const tools = prompt.tools.map((tool, i) =>
    markLastTool && i === prompt.tools.length - 1 ? { ...tool, cache_control: marker } : tool,
  );
  const marked = new Set(prompt.agentTools ? messageBreakpoints(prompt.messages) : []);
  const messages = prompt.messages.map((message, i) =>
    marked.has(i) ? markLastBlock(message, marker) : message,
  );
  return { tools, system, messages };
}

/** The messages whose last block gets a breakpoint: the last one, and where the previous call ended if needed. */
function messageBreakpoints(messages: readonly Message[]): number[] {
  const last = messages.length - 1;
  if (last < 0) return [];
  const previousEnd = previousCallEnd(messages);
  if (previousEnd === undefined) return [last];
  const added = messages.slice(previousEnd + 1).reduce((sum, m) => sum + blocksOf(m).length, 0);
  return added > LOOKBACK_REACH ? [previousEnd, last] : [last];
}

/**
 * The message the previous call of this conversation ended with: the turn before the last assistant turn (that
 * call's reply), when the conversation goes on after that reply.
 */
function previousCallEnd(messages: readonly Message[]): number | undefined {
  const reply = messages.findLastIndex((m) => m.role === 'assistant');
  if (reply < 1 || reply === messages.length - 1) return undefined;
  return reply - 1;
}

function blocksOf(message: Message): Block[] {
  return typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
}

function markLastBlock(message: Message, marker: CacheControl): Message {
  const blocks = blocksOf(message);
  const lastBlock = blocks.at(-1);
  if (!lastBlock || !canCarryMarker(lastBlock)) return message;
  // The marked block is the same kind of block, so the message keeps its type; TypeScript cannot follow that.
  return {
    ...message,
    content: [...blocks.slice(0, -1), { ...lastBlock, cache_control: marker }],
  } as Message;
}

/** The blocks our conversation is made of; all three take a breakpoint. */
function canCarryMarker(
  block: Block,
): block is TextBlock | Anthropic.Messages.ToolUseBlockParam | Anthropic.Messages.ToolResultBlockParam {
  return block.type === 'text' || block.type === 'tool_use' || block.type === 'tool_result';
}
