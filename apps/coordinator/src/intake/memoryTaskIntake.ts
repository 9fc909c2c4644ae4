import { subjects, type TroupeEvent } from '@troupe/protocol';
import type { ExhaustedTask } from './deadLetters.ts';
import type { TaskDelivery, TaskIntake, TaskQueue, TaskQueueOptions } from './taskQueue.ts';

/** How a delivery was settled by the runner that got it. */
export type Settlement = { kind: 'ack' } | { kind: 'term' } | { kind: 'nak'; delayMs?: number };

/** One delivery handed to the runner, with what the runner did with it. */
export interface MemoryDelivery {
  delivery: TaskDelivery;
  /** Settles when the runner's handler returns. */
  handled: Promise<void>;
  /** How the runner settled it, once it has; throws when it was settled more than once. */
  settlement(): Settlement | undefined;
  /** Times the runner said it was still working on it. */
  keepAlives(): number;
  /** Whether the task is parked now (waiting on a person or a model). */
  parked(): boolean;
}

/**
 * A {@link TaskIntake} in memory, for `troupe run` (one task run in-process, nothing stored) and for unit tests of a
 * pipeline runner: the test hands it task messages (a first
 * delivery, or another delivery of the same stream message) and sees how each was settled — acked, handed back
 * (`nak`) or terminated — and what was dead-lettered. It does not redeliver by itself: a test that wants a
 * redelivery delivers the message again.
 */
export class MemoryTaskIntake implements TaskIntake {
  /** Tasks stored on the dead-letter subject, in order. */
  readonly deadLetters: {
    pipeline: string;
    task: ExhaustedTask;
    reason: { taskId: string; message: string };
  }[] = [];
  #options: TaskQueueOptions | undefined;
  #sequence = 0;
  readonly #active = new Set<Promise<void>>();
  #parked = 0;

  async start(options: TaskQueueOptions): Promise<TaskQueue> {
    this.#options = options;
    const intake = this;
    return {
      consumer: `memory-${options.pipeline}`,
      get active() {
        return intake.#active.size;
      },
      get parked() {
        return intake.#parked;
      },
      async stop() {
        await Promise.allSettled([...intake.#active]);
      },
    };
  }

  async deadLetter(
    pipeline: string,
    task: ExhaustedTask,
    reason: { taskId: string; message: string },
  ): Promise<void> {
    this.deadLetters.push({ pipeline, task, reason });
  }

  /** Every ended task's events a restart or fork may read, by task id; a test puts them here. */
  readonly events = new Map<string, TroupeEvent[]>();

  async taskEvents(taskId: string): Promise<TroupeEvent[]> {
    return this.events.get(taskId) ?? [];
  }

  /**
   * Hands a task message to the runner. Without `streamSequence` it is a new message; with one, another delivery
   * of that message (`deliveryCount` says which; 1 by default).
   */
  deliver(
    payload: unknown,
    options: {
      streamSequence?: number;
      deliveryCount?: number;
      headers?: Record<string, string>;
      /** When the message was stored (epoch ms); a fixed day by default, for tests. */
      storedAt?: number;
    } = {},
  ): MemoryDelivery {
    const queue = this.#options;
    if (!queue) throw new Error('the runner has not started the intake yet');
    const settlements: Settlement[] = [];
    let keepAlives = 0;
    let parked = false;
    const settle = (how: Settlement) => {
      settlements.push(how);
      if (parked) this.#parked--;
      parked = false;
    };
    const data = new TextEncoder().encode(typeof payload === 'string' ? payload : JSON.stringify(payload));
    const delivery: TaskDelivery = {
      subject: subjects.task(queue.pipeline),
      data,
      headers: options.headers ?? {},
      streamSequence: options.streamSequence ?? ++this.#sequence,
      storedAt: options.storedAt ?? Date.UTC(2026, 0, 1),
      deliveryCount: options.deliveryCount ?? 1,
      ack: () => settle({ kind: 'ack' }),
      term: () => settle({ kind: 'term' }),
      nak: (delayMs) => settle({ kind: 'nak', ...(delayMs === undefined ? {} : { delayMs }) }),
      working: () => void keepAlives++,
      park: (now) => {
        if (settlements.length > 0 || now === parked) return;
        parked = now;
        this.#parked += now ? 1 : -1;
      },
    };
    const handled = queue.handle(delivery);
    this.#active.add(handled);
    void handled.finally(() => this.#active.delete(handled)).catch(() => {});
    const settlement = () => {
      if (settlements.length > 1) {
        throw new Error(
          `the delivery was settled ${settlements.length} times: ${JSON.stringify(settlements)}`,
        );
      }
      return settlements[0];
    };
    return { delivery, handled, settlement, keepAlives: () => keepAlives, parked: () => parked };
  }
}
