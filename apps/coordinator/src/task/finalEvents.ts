import type { TaskFailureReason, TroupeEvent, UsageTotals } from '@troupe/protocol';
import { type EventFactory, type EventScope, preview } from '@troupe/runtime';
import type { TaskOutput, WorkflowFailure } from '../workflow/workflowTypes.ts';

/**
 * A last guard on what an event carries: a step's output over the object store's threshold is already a preview
 * with a reference to the whole (see `ValueStore`), and a failure's message is never this long.
 */
const MAX_EVENT_OUTPUT = 256 * 1024;

/**
 * The events that end a task of a pipeline: `task.completed`, `task.failed`, `task.cancelled` (a client's reading of
 * a task's events is `@troupe/client`'s `taskEvents.ts`; these are the coordinator's making of its final one).
 */
export class FinalEvents {
  readonly #events: EventFactory;
  readonly #pipeline: string;

  constructor(events: EventFactory, pipeline: string) {
    this.#events = events;
    this.#pipeline = pipeline;
  }

  /** The task's final event, from how its workflow ended. */
  final(scope: EventScope, output: TaskOutput, durationMs: number): TroupeEvent {
    if (output.status === 'cancelled') {
      return this.#events.make(
        'task.cancelled',
        scope,
        { ...(output.cancelReason ? { reason: output.cancelReason } : {}), usage: output.usage },
        { from: 'user', to: this.#pipeline },
      );
    }
    if (output.status === 'completed') {
      return this.#events.make(
        'task.completed',
        scope,
        {
          output: preview(output.output, MAX_EVENT_OUTPUT),
          ...(output.outputRef ? { outputRef: output.outputRef } : {}),
          ...(output.approved === undefined ? {} : { approved: output.approved }),
          rounds: output.rounds,
          usage: output.usage,
          usageByAgent: output.usageByAgent,
          durationMs,
        },
        { from: 'workflow', to: 'user' },
      );
    }
    const failure: WorkflowFailure = output.failure ?? { reason: 'internal', message: 'the workflow failed' };
    return this.failed(scope, failure.reason, failure.message, output.usage, durationMs, failure.step);
  }

  /** The task's `task.failed`. */
  failed(
    scope: EventScope,
    reason: TaskFailureReason,
    message: string,
    usage: UsageTotals,
    durationMs: number,
    step?: string,
  ): TroupeEvent {
    return this.#events.make(
      'task.failed',
      scope,
      { reason, message: preview(message, MAX_EVENT_OUTPUT), usage, durationMs, ...(step ? { step } : {}) },
      { from: 'workflow', to: 'user' },
    );
  }
}
