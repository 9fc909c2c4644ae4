import type { Message } from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import type { HumanRequest } from '@troupe/protocol';

/** A person's reply to one approval or question, as `GatewayActions.decide` takes it. */
export type Decision =
  | { requestId: string; body: { decision: 'allow' | 'deny'; reason?: string } }
  | { requestId: string; body: { answer: string } };

const APPROVE = /^\s*(approve|approved|allow|yes)\b[\s:,.-]*([\s\S]*)$/i;
const DENY = /^\s*(deny|denied|reject|no)\b[\s:,.-]*([\s\S]*)$/i;

/**
 * Reads a client's message to a task in INPUT_REQUIRED as the reply to what it is asked.
 *
 * - An approval takes a data part `{ decision: 'approve' | 'deny', reason? }` (`allow` is read as `approve`), or text
 *   `approve [why]` / `deny <why>`; a deny needs its reason, since the agent is told.
 * - A question takes a data part `{ answer }` (any JSON; text is sent as it is, anything else as JSON), or text.
 * - With several requests pending, `requestId` (in the data part, or in the message's metadata) says which; with one,
 *   it may be left out.
 */
export function decisionOf(message: Message, pending: readonly HumanRequest[]): Decision {
  const data = dataOf(message);
  const text = message.parts
    .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
    .filter((t) => t.trim() !== '')
    .join('\n');
  const named = stringField(data, 'requestId') ?? stringField(message.metadata, 'requestId');
  const request = named ? pending.find((r) => r.id === named) : pending.length === 1 ? pending[0] : undefined;
  if (!request) {
    const ids = pending.map((r) => `${r.id} (${r.kind}: ${r.prompt})`).join('; ');
    throw new RequestMalformedError(
      named
        ? `request ${named} is not pending on this task; pending: ${ids}`
        : `${pending.length} requests are pending on this task: name one as requestId in a data part; pending: ${ids}`,
    );
  }
  return request.kind === 'approval'
    ? { requestId: request.id, body: approvalOf(data, text) }
    : { requestId: request.id, body: { answer: answerOf(data, text) } };
}

function approvalOf(data: Record<string, unknown> | undefined, text: string) {
  const said = stringField(data, 'decision');
  const reasonGiven = stringField(data, 'reason');
  let decision: 'allow' | 'deny' | undefined;
  let reason = reasonGiven;
  if (said !== undefined) {
    decision = /^(approve|allow)$/i.test(said) ? 'allow' : /^deny$/i.test(said) ? 'deny' : undefined;
    if (!decision) {
      throw new RequestMalformedError(`decision: "${said}" is neither approve nor deny`);
    }
  } else {
    const approve = APPROVE.exec(text);
    const deny = DENY.exec(text);
    decision = approve ? 'allow' : deny ? 'deny' : undefined;
    reason ??= (approve?.[2] ?? deny?.[2])?.trim() || undefined;
  }
  if (!decision) {
    throw new RequestMalformedError(
      'this task waits for an approval: answer with text "approve" or "deny <reason>", or a data part ' +
        '{"decision":"approve"|"deny","reason":"…"}',
    );
  }
  if (decision === 'deny' && !reason) {
    throw new RequestMalformedError('a deny needs a reason: the agent is told why ("deny <reason>")');
  }
  return { decision, ...(reason ? { reason } : {}) };
}

function answerOf(data: Record<string, unknown> | undefined, text: string): string {
  if (data && 'answer' in data) {
    const answer = data.answer;
    return typeof answer === 'string' ? answer : JSON.stringify(answer);
  }
  if (text.trim() === '') {
    throw new RequestMalformedError(
      'this task waits for an answer to a question: send it as text, or as a data part {"answer": …}',
    );
  }
  return text;
}

/** The message's first data part that is an object. */
function dataOf(message: Message): Record<string, unknown> | undefined {
  for (const part of message.parts) {
    const value = part.content?.$case === 'data' ? part.content.value : undefined;
    if (typeof value === 'object' && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>;
  }
  return undefined;
}

const stringField = (value: Record<string, unknown> | undefined, key: string): string | undefined => {
  const field = value?.[key];
  return typeof field === 'string' && field !== '' ? field : undefined;
};
