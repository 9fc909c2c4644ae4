import {
  type ElicitRequestFormParams,
  type InputRequest,
  type InputResponseView,
  inputRequired,
} from '@modelcontextprotocol/server';
import type { HumanRequest } from '@troupe/protocol';
import type { ElicitationForm } from './elicitationForm.ts';

/** The form a person fills in for an approval: allow or deny, and why (the agent is told). */
const APPROVAL_FORM: ElicitRequestFormParams['requestedSchema'] = {
  type: 'object',
  properties: {
    decision: {
      type: 'string',
      title: 'Decision',
      enum: ['allow', 'deny'],
      description: 'allow: the agent runs the call; deny: it does not, and is told why',
    },
    reason: { type: 'string', title: 'Reason', description: 'why (passed to the agent; asked for a deny)' },
  },
  required: ['decision'],
};

/** The form for a question asked as text (a step with an `answer` schema reads it as JSON when it fits, and asks again on a miss). */
const QUESTION_FORM: ElicitRequestFormParams['requestedSchema'] = {
  type: 'object',
  properties: { answer: { type: 'string', title: 'Answer' } },
  required: ['answer'],
};

/**
 * What an approval or a question asks the MCP caller's user, as a form-mode elicitation. A question whose step
 * declares an answer schema a form can show (`declared`, see `elicitationForm`) is asked with that form; any other
 * is asked for text.
 */
export function elicitationFor(request: HumanRequest, declared?: ElicitationForm): InputRequest {
  if (request.kind === 'approval') {
    const call = request.arguments ? `${request.tool}(${clip(request.arguments, 500)})` : request.tool;
    return inputRequired.elicit({
      mode: 'form',
      message: `Task ${request.taskId} (${request.pipeline}): agent ${request.agent} asks to run ${call}. ${request.prompt}`,
      requestedSchema: APPROVAL_FORM,
    });
  }
  return inputRequired.elicit({
    mode: 'form',
    message: `Task ${request.taskId} (${request.pipeline}): ${request.agent} asks: ${request.prompt}`,
    requestedSchema: declared ?? QUESTION_FORM,
  });
}

/** What Troupe does with the user's response: a decision or an answer to record, or nothing (the request stays open). */
export type HumanReply =
  | { kind: 'decide'; body: { decision: 'allow' | 'deny'; reason?: string; by: string } }
  | { kind: 'answer'; body: { answer: string; by: string } }
  | { kind: 'leave'; why: string };

/**
 * Reads the user's response to {@link elicitationFor}. Accepting decides or answers; declining or cancelling an
 * approval denies it with a reason, since the user said no; a question cannot be denied, so it stays open for
 * `troupe answer` or the dashboard.
 */
export function replyOf(
  request: HumanRequest,
  response: InputResponseView,
  by: string,
  declared = false,
): HumanReply {
  if (response.kind !== 'elicit') return { kind: 'leave', why: 'the client sent no answer' };
  const content = response.content ?? {};
  if (request.kind === 'approval') {
    if (response.action !== 'accept') {
      return {
        kind: 'decide',
        body: {
          decision: 'deny',
          reason: `the user ${response.action === 'decline' ? 'declined' : 'cancelled'} it in ${by}`,
          by,
        },
      };
    }
    const decision =
      content.decision === 'deny' ? 'deny' : content.decision === 'allow' ? 'allow' : undefined;
    if (!decision) return { kind: 'leave', why: 'the answer named no decision (allow or deny)' };
    const reason =
      typeof content.reason === 'string' && content.reason.trim() !== '' ? content.reason : undefined;
    return {
      kind: 'decide',
      body: {
        decision,
        by,
        ...(reason ? { reason } : decision === 'deny' ? { reason: `denied in ${by}` } : {}),
      },
    };
  }
  if (response.action !== 'accept')
    return {
      kind: 'leave',
      why: `the user ${response.action === 'decline' ? 'declined' : 'cancelled'} the question`,
    };
  // The declared form's fields are the answer itself: the step reads it as JSON.
  if (declared) return { kind: 'answer', body: { answer: JSON.stringify(content), by } };
  if (typeof content.answer !== 'string' || content.answer === '')
    return { kind: 'leave', why: 'the answer was empty' };
  return { kind: 'answer', body: { answer: content.answer, by } };
}

/** How to settle a request without the MCP client: the command, or the gateway's route the dashboard uses. */
export function howToSettle(request: HumanRequest): string {
  const command =
    request.kind === 'approval'
      ? `troupe approve ${request.id}, or troupe deny ${request.id} --reason "…"`
      : `troupe answer ${request.id} "…"`;
  return `\`${command}\` or on the dashboard (POST /v1/approvals/${request.id} on the gateway)`;
}

/** What a call says while it waits on a request it cannot ask its user (the client cannot, or its token may not). */
export function elsewhere(request: HumanRequest): string {
  const what =
    request.kind === 'approval'
      ? `approval ${request.id} (agent ${request.agent} wants to run ${request.tool ?? 'a tool'})`
      : `question ${request.id} (${clip(request.prompt, 200)})`;
  return `task ${request.taskId} waits for ${what}: this MCP client cannot be asked; decide it with ${howToSettle(request)}`;
}

const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}…` : text);
