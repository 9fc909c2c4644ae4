import type { Message } from '@a2a-js/sdk';
import { ContentTypeNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors';

/** What a client's message starts a Troupe task with. */
export interface TaskInput {
  goal: string;
  input?: Record<string, unknown>;
}

/**
 * A message as a task: its text parts, joined, are the goal; its data parts are the input (an object's keys merged
 * in, any other value under `data`). Files (raw bytes or URLs) are not taken: a Troupe task's input is JSON.
 */
export function taskInputOf(message: Message): TaskInput {
  const texts: string[] = [];
  let input: Record<string, unknown> | undefined;
  for (const part of message.parts) {
    const content = part.content;
    if (content?.$case === 'text') texts.push(content.value);
    else if (content?.$case === 'data') {
      const value: unknown = content.value;
      input = {
        ...input,
        ...(typeof value === 'object' && value !== null && !Array.isArray(value)
          ? (value as Record<string, unknown>)
          : { data: value }),
      };
    } else if (content?.$case === 'raw' || content?.$case === 'url') {
      throw new ContentTypeNotSupportedError(
        `a ${content.$case === 'raw' ? 'file' : 'file URL'} part${part.mediaType ? ` (${part.mediaType})` : ''} is not taken: send text parts (the goal) and data parts (the input)`,
      );
    }
  }
  if (message.parts.length === 0) throw new RequestMalformedError('message.parts: the message has no parts');
  return { goal: texts.join('\n').trim(), ...(input ? { input } : {}) };
}
