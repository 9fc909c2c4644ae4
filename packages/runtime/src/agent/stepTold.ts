import type { ChatMessage } from '@troupe/llm';
import type { ToldMessage } from '@troupe/protocol';

/**
 * The messages people told a step's task (`troupe tell`), as one run of the step reads them: those its request
 * carries and those heard as `task.told` events while it runs, each once by id. A run that tells it nothing keeps
 * two empty fields: a parked step pays for no list.
 */
export class StepTold {
  /** Heard and not read yet, oldest first. */
  #unread: ToldMessage[] | undefined;
  /** The ids read into the conversation in this run, in the order read. */
  #read: string[] | undefined;

  constructor(told?: readonly ToldMessage[]) {
    for (const message of told ?? []) this.hear(message);
  }

  /** A message for the step: kept to read before the next model call, unless it was heard or read already. */
  hear(message: ToldMessage): void {
    if (this.#read?.includes(message.id) || this.#unread?.some((m) => m.id === message.id)) return;
    this.#unread ??= [];
    this.#unread.push(message);
  }

  /** What is heard and not read yet, oldest first. */
  get unread(): readonly ToldMessage[] {
    return this.#unread ?? [];
  }

  /** Of `messages` (what an earlier run read at a turn), those this run has not read yet. */
  notRead(messages: readonly ToldMessage[]): ToldMessage[] {
    return messages.filter((m) => !this.#read?.includes(m.id));
  }

  /** The messages went into a conversation the model answered: they are read, and never read again in this run. */
  read(messages: readonly ToldMessage[]): void {
    if (messages.length === 0) return;
    this.#read ??= [];
    for (const { id } of messages) if (!this.#read.includes(id)) this.#read.push(id);
    this.#unread = this.#unread?.filter((m) => !this.#read?.includes(m.id));
  }

  /** The ids read in this run, for the step's reply (`toldRead`). */
  get readIds(): readonly string[] {
    return this.#read ?? [];
  }
}

/**
 * A told message as the user turn the agent reads: marked as a person's word sent while it works, so the model
 * neither takes it for the task itself nor for a tool's output. Only its text and author: the same message is the
 * same turn in every run, so a recorded reply still matches its conversation.
 */
export function toldTurn(message: ToldMessage): ChatMessage {
  const who = message.by === undefined ? 'a person' : message.by;
  return {
    role: 'user',
    content: `Message from ${who}, sent while you work on this step:\n\n${message.text}`,
  };
}
