import { errorMessage, subjects, type TroupeEvent } from '@troupe/protocol';
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

  constructor(options: MemoryBusOptions) {
    super(options);
  }

  /** Hears each event of one task from now on, until the returned stop is called. */
  listen(taskId: string, onEvent: (event: TroupeEvent) => void): () => void {
    this.#listeners.set(taskId, onEvent);
    return () => {
      if (this.#listeners.get(taskId) === onEvent) this.#listeners.delete(taskId);
    };
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
