import type { ChatMessage } from '@troupe/llm';

/**
 * Compaction: when a step's conversation outgrows its agent's `contextTokens`, the turns between the opening
 * (instructions and task) and the recent tail are summarized by the agent's own model and replaced by the summary.
 */

/** Messages kept whole at the end of a conversation when older ones are summarized. */
const KEEP_RECENT = 6;

const SUMMARY_INSTRUCTIONS =
  'Summarize the conversation below for the agent that will continue it: what was asked, what was done ' +
  '(tool calls and their results, files written), what was decided, and what is still open. Be factual and ' +
  'concise; keep names, paths, numbers and errors exactly. Reply with the summary only.';

/** A rough count (4 characters a token) that is good enough to decide when to compact. */
export function estimateTokens(messages: readonly ChatMessage[]): number {
  const chars = messages.reduce(
    (n, m) =>
      n +
      m.content.length +
      (m.role === 'assistant'
        ? (m.toolCalls ?? []).reduce((k, c) => k + c.arguments.length + c.name.length, 0)
        : 0),
    0,
  );
  return Math.ceil(chars / 4);
}

/** Where the kept tail starts: at most KEEP_RECENT messages, never starting inside a tool exchange. */
function tailStart(messages: readonly ChatMessage[]): number {
  let start = Math.max(2, messages.length - KEEP_RECENT);
  while (start < messages.length && messages[start]?.role === 'tool') start++;
  return start;
}

/** The turns between the opening (instructions and task) and the recent tail: what a compaction summarizes. */
export function olderTurns(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.slice(2, tailStart(messages));
}

/** The conversation with its older turns replaced by their summary. */
export function compacted(messages: readonly ChatMessage[], summary: string): ChatMessage[] {
  return [
    ...messages.slice(0, 2),
    {
      role: 'user',
      content: `Summary of the work so far (earlier turns were condensed to save context):\n${summary}`,
    },
    ...messages.slice(tailStart(messages)),
  ];
}

/** What the model is asked to summarize older turns: instructions, then the turns as a plain transcript. */
export function summaryRequest(older: readonly ChatMessage[]): ChatMessage[] {
  const transcript = older
    .map((m) => {
      if (m.role === 'tool') return `[tool ${m.name} result${m.isError ? ' (error)' : ''}] ${m.content}`;
      if (m.role === 'assistant' && m.toolCalls?.length) {
        return `[assistant] ${m.content} ${m.toolCalls.map((c) => `(calls ${c.name} ${c.arguments})`).join(' ')}`;
      }
      return `[${m.role}] ${m.content}`;
    })
    .join('\n');
  return [
    { role: 'system', content: SUMMARY_INSTRUCTIONS },
    { role: 'user', content: transcript },
  ];
}
