import { errorMessage, type InvalidMessageEvent, subjects, type TroupeEvent } from '@troupe/protocol';
import { MemoryBus, type MemoryBusOptions } from '@troupe/runtime';

/**
 * The bus of an in-process run (`troupe run`): a {@link MemoryBus} whose events go to the run's own listener as the
 * objects the run made, with no JSON text in between, and onto the bus only when a part of the process subscribes
 * to their subject (an agent host hears `task.*` events to stop or steer its steps). Nothing else hears them: there is
 * no outbox and no stream. A listener is called after the publisher's call returns, in publishing order, as a bus
 * delivers.
 */
export class InProcessBus extends MemoryBus {
  readonly #listeners = new Map<string, (event: TroupeEvent) => void>();
  /** Why a listened task's message was refused (reported invalid by the runner), by task id. */
  readonly #refusals = new Map<string, string>();

  constructor(options: MemoryBusOptions) {
    super(options);
  }

  /** Hears each event of one task from now on, until the returned stop is called. */
  listen(taskId: string, onEvent: (event: TroupeEvent) => void): () => void {
    this.#listeners.set(taskId, onEvent);
    return () => {
      if (this.#listeners.get(taskId) !== onEvent) return;
      this.#listeners.delete(taskId);
      this.#refusals.delete(taskId);
    };
  }

  /** Why the runner refused the message of a task listened to now, if it did (the run then has no final event). */
  refusal(taskId: string): string | undefined {
    return this.#refusals.get(taskId);
  }

  override reportInvalid(report: Omit<InvalidMessageEvent, 'id' | 'ts' | 'kind'>): void {
    // A refused task message names its task only in its payload, which an in-process run writes id first.
    const quoted = /^\{"id":("(?:[^"\\]|\\.)*")/.exec(report.payload)?.[1];
    const taskId = report.taskId ?? (quoted === undefined ? undefined : (JSON.parse(quoted) as string));
    if (taskId !== undefined && this.#listeners.has(taskId)) this.#refusals.set(taskId, report.reason);
    super.reportInvalid(report);
  }

  override publishEvent(event: TroupeEvent): Promise<boolean> {
    const listener = this.#listeners.get(event.taskId);
    if (listener) queueMicrotask(() => this.#tell(event, listener));
    if (!this.hasListener(subjects.event(event.pipeline, event.taskId, event.kind)))
      return Promise.resolve(true);
    return super.publishEvent(event);
  }

  #tell(event: TroupeEvent, listener: (event: TroupeEvent) => void): void {
    // A listener stopped meanwhile (its run is over) hears no more.
    if (this.#listeners.get(event.taskId) !== listener) return;
    try {
      listener(event);
    } catch (error) {
      // As a bus does with a handler that throws: the run goes on.
      this.logger.error(
        { err: error, taskId: event.taskId },
        `event listener failed: ${errorMessage(error)}`,
      );
    }
  }
}
