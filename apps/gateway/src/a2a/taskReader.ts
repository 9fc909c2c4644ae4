import type { StreamResponse } from '@a2a-js/sdk';
import { followTaskEvents, readTaskEvents } from '@troupe/client';
import type { TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { JetStreamBus, ValueStore } from '@troupe/runtime';
import { AnswerSchemas } from './answerSchemas.ts';
import { type A2aTaskRef, isTerminal, TaskFold } from './taskMapping.ts';

/** A Troupe task's A2A form as its events make it now, and which of its events that took in. */
export interface TaskSnapshot {
  record: WorkflowRecord;
  ref: A2aTaskRef;
  fold: TaskFold;
  /** The ids of the events folded in: following the task live from its start skips them. */
  seen: Set<string>;
}

/** The A2A task of a Troupe task: its id, and its gateway session as its context (itself when it has none). */
export const refOf = (record: Pick<WorkflowRecord, 'taskId' | 'metadata'>): A2aTaskRef => ({
  taskId: record.taskId,
  contextId: record.metadata?.session ?? record.taskId,
});

/**
 * Reads a task's A2A form from what NATS keeps — its events in `EVENTS`, and its record in `workflows` for an ending
 * whose event the stream no longer holds — so every gateway, and this one after a restart, gives the same task.
 */
export class TaskReader {
  readonly #bus: JetStreamBus;
  readonly #values: ValueStore;

  readonly #schemas: AnswerSchemas;

  constructor(bus: JetStreamBus, values: ValueStore) {
    this.#bus = bus;
    this.#values = values;
    this.#schemas = new AnswerSchemas(bus);
  }

  /**
   * Folds an event into a task, with what the fold cannot know from the event alone: a completed task's whole
   * output, and the schema a question's answer must match.
   */
  async applyTo(fold: TaskFold, event: TroupeEvent): Promise<StreamResponse[]> {
    if (event.kind === 'human.asked') {
      const schema = await this.#schemas.of(event.taskId, event.data.stepId);
      if (schema !== undefined) fold.expectAnswer(event.data.questionId, schema);
    }
    return fold.apply(await this.whole(event));
  }

  async snapshot(record: WorkflowRecord): Promise<TaskSnapshot> {
    const ref = refOf(record);
    const fold = new TaskFold(ref, record.createdAt);
    const seen = new Set<string>();
    for (const event of await readTaskEvents(this.#bus, record.taskId, record.pipeline)) {
      seen.add(event.id);
      await this.applyTo(fold, event);
    }
    if (record.final && !isTerminal(fold.state)) fold.apply(await this.whole(record.final));
    return { record, ref, fold, seen };
  }

  /**
   * The task's events from its first, live once the stored ones are read, leaving out those `skip` names (fold them
   * in with {@link applyTo}); ends
   * after its final event, when `signal` aborts, or when the consumer of the returned iterator stops.
   */
  async *follow(
    task: { taskId: string; pipeline: string },
    signal: AbortSignal,
    skip: ReadonlySet<string> = new Set(),
  ): AsyncGenerator<TroupeEvent, void, undefined> {
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    const queue = new Handoff<TroupeEvent>();
    const following = followTaskEvents(this.#bus, task, {
      signal: stop.signal,
      onEvent: ({ event }) => (skip.has(event.id) ? undefined : queue.put(event)),
    }).then(
      () => queue.end(),
      (error: unknown) => queue.end(error),
    );
    try {
      for (;;) {
        const next = await queue.take();
        if (next === undefined) return;
        yield next;
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      stop.abort();
      await following;
    }
  }

  /** The event with a completed task's whole output, when the event holds only its preview. */
  async whole(event: TroupeEvent): Promise<TroupeEvent> {
    if (event.kind !== 'task.completed' || !event.data.outputRef) return event;
    try {
      const output = await this.#values.read(event.data.outputRef);
      return { ...event, data: { ...event.data, output } };
    } catch {
      // The preview says where the whole output is; the task is not failed for a store that cannot be read.
      return event;
    }
  }
}

/**
 * Events handed from the NATS consumer's callback to the iterator that reads them, a few at a time: the consumer
 * waits while the reader (a slow HTTP client) has not taken them.
 */
class Handoff<T> {
  readonly #items: T[] = [];
  #ended = false;
  #failure: unknown;
  #wake: (() => void) | undefined;
  #room: (() => void) | undefined;

  async put(item: T): Promise<void> {
    this.#items.push(item);
    this.#notify();
    while (this.#items.length >= 64 && !this.#ended) await new Promise<void>((r) => (this.#room = r));
  }

  end(failure?: unknown): void {
    this.#ended = true;
    this.#failure = failure;
    this.#notify();
    this.#room?.();
  }

  /** The next item; undefined once the source ended and every item is taken. */
  async take(): Promise<T | undefined> {
    for (;;) {
      if (this.#items.length > 0) {
        const item = this.#items.shift() as T;
        this.#room?.();
        this.#room = undefined;
        return item;
      }
      if (this.#ended) {
        if (this.#failure !== undefined) throw this.#failure;
        return undefined;
      }
      await new Promise<void>((r) => (this.#wake = r));
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
