import {
  EventMessage,
  eventsIn,
  FINAL_EVENT_KINDS,
  InvalidMessageEvent,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import type { Bus, BusSubscription } from '@troupe/runtime';

export interface WatchOptions {
  taskId?: string;
  pipeline?: string;
  /** Also deliver reports of invalid messages. */
  invalid?: boolean;
  onEvent(event: TroupeEvent): void;
  onInvalid?(event: InvalidMessageEvent): void;
}

/** The subject of one task's events, else one pipeline's, else every task's. */
export function eventsSubject(options: { taskId?: string; pipeline?: string }): string {
  if (options.taskId) return subjects.taskEvents(options.taskId, options.pipeline);
  return options.pipeline ? subjects.pipelineEvents(options.pipeline) : subjects.allTaskEvents;
}

/** Subscribes to the message flow (optionally one task's or one pipeline's) and to invalid-message reports. */
export function watchEvents(bus: Bus, options: WatchOptions): BusSubscription[] {
  const subject = eventsSubject(options);
  const subscriptions = [
    // An event not on its own subject is forged (see eventsIn): the broker checked who sent the subject, not it. A
    // batch is its events, in order.
    bus.subscribe(
      subject,
      EventMessage,
      (d) => {
        const events = eventsIn(d.value, d.subject);
        if (events.ok) for (const event of events.value) options.onEvent(event);
      },
      { reporter: 'cli:tail' },
    ),
  ];
  if (options.invalid && options.onInvalid) {
    const onInvalid = options.onInvalid;
    subscriptions.push(
      bus.subscribe(subjects.invalid, InvalidMessageEvent, (d) => onInvalid(d.value), {
        reporter: 'cli:tail',
      }),
    );
  }
  return subscriptions;
}

export interface FinalTracker {
  /** Looks at an event of the task; the first final one is kept. */
  note(event: TroupeEvent): void;
  /** The final event noted so far, if any. */
  readonly current: TroupeEvent | undefined;
  /** Resolves with the first final event noted. */
  readonly arrived: Promise<TroupeEvent>;
}

/** Keeps the first final event among those it is shown, for a look now or to wait for. */
export function finalTracker(): FinalTracker {
  let current: TroupeEvent | undefined;
  let resolve: (event: TroupeEvent) => void = () => {};
  const arrived = new Promise<TroupeEvent>((r) => (resolve = r));
  return {
    note: (event) => {
      if (!FINAL_EVENT_KINDS.includes(event.kind)) return;
      current ??= event;
      resolve(event);
    },
    get current() {
      return current;
    },
    arrived,
  };
}

/** Resolves with a task's final event. */
export function waitForFinal(
  bus: Bus,
  task: { taskId: string; pipeline: string },
  onEvent: (event: TroupeEvent) => void,
) {
  const final = finalTracker();
  // The task's own pipeline, not any: a user allowed to read only that pipeline's events may wait for it.
  const subscriptions = watchEvents(bus, {
    ...task,
    onEvent: (event) => {
      onEvent(event);
      final.note(event);
    },
  });
  return {
    final: final.arrived,
    stop: () => {
      for (const s of subscriptions) s.unsubscribe();
    },
  };
}
