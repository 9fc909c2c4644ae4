import { type Message, type Part, Role, type Task } from '@a2a-js/sdk';
import type { AgentStepRequest } from '@troupe/protocol';
import { buildTaskText, VERDICT_INSTRUCTIONS } from '@troupe/runtime';

/**
 * The message a step sends its remote agent: what a local agent would be asked, as text, and the same as data
 * (goal, input, earlier outputs, feedback), for an agent that reads structure. A reviewer is also told to answer
 * with its verdict.
 */
export function stepMessage(
  request: AgentStepRequest,
  ids: { messageId: string; contextId: string },
): Message {
  const text =
    request.expect === 'verdict'
      ? `${buildTaskText(request)}\n\n${VERDICT_INSTRUCTIONS}`
      : buildTaskText(request);
  const data = {
    goal: request.goal,
    ...(request.input === undefined ? {} : { input: request.input }),
    context: request.context.map(({ step, agent, round, output }) => ({ step, agent, round, output })),
    ...(request.feedback === undefined ? {} : { feedback: request.feedback }),
    expect: request.expect,
    step: request.step,
    round: request.round,
  };
  return userMessage(ids, [
    textPart(text),
    {
      content: { $case: 'data', value: data },
      metadata: undefined,
      filename: '',
      mediaType: 'application/json',
    },
  ]);
}

/** A person's answer to what the remote agent asked, as the next message on its task. */
export function answerMessage(
  answer: string,
  ids: { messageId: string; contextId: string; taskId: string },
): Message {
  return userMessage(ids, [textPart(answer)]);
}

function userMessage(ids: { messageId: string; contextId: string; taskId?: string }, parts: Part[]): Message {
  return {
    messageId: ids.messageId,
    contextId: ids.contextId,
    taskId: ids.taskId ?? '',
    role: Role.ROLE_USER,
    parts,
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const textPart = (text: string): Part => ({
  content: { $case: 'text', value: text },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});

/** What parts say: their text joined, and the first data part's value. Files are named, not read. */
export function readParts(parts: readonly Part[]): { text: string; data?: unknown } {
  const texts: string[] = [];
  let data: unknown;
  let hasData = false;
  for (const part of parts) {
    const content = part.content;
    if (!content) continue;
    if (content.$case === 'text') texts.push(content.value);
    else if (content.$case === 'data' && !hasData) {
      data = content.value;
      hasData = true;
    } else if (content.$case === 'url') texts.push(`[${part.filename || 'file'}](${content.value})`);
    else if (content.$case === 'raw')
      texts.push(`[${part.filename || 'file'}: ${content.value.length} bytes not shown]`);
  }
  return { text: texts.join('\n\n'), ...(hasData ? { data } : {}) };
}

/**
 * A finished task's output: every artifact's parts in order (the status message's when it has no artifacts). The
 * text is the output; a data part is the structured output, and the output too when there is no text.
 */
export function taskOutput(task: Task): { output: string; structured?: unknown } {
  const parts =
    task.artifacts.length > 0 ? task.artifacts.flatMap((a) => a.parts) : (task.status?.message?.parts ?? []);
  return outputOf(parts);
}

/** A reply that came as a message rather than a task: its parts are the output. */
export function messageOutput(message: Message): { output: string; structured?: unknown } {
  return outputOf(message.parts);
}

function outputOf(parts: readonly Part[]): { output: string; structured?: unknown } {
  const { text, data } = readParts(parts);
  if (data === undefined) return { output: text };
  return { output: text === '' ? JSON.stringify(data) : text, structured: data };
}

/** Whether the task's history holds a message with this id: it reached the remote agent. */
export const holdsMessage = (task: Task, messageId: string): boolean =>
  task.history.some((message) => message.messageId === messageId);
