import { FINAL_EVENT_KINDS, InvalidMessageEvent, subjects, TroupeEvent } from '@troupe/protocol';
import type { BusSubscription, NatsBus } from '@troupe/runtime';

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
export function watchEvents(bus: NatsBus, options: WatchOptions): BusSubscription[] {
  const subject = eventsSubject(options);
  const subscriptions = [
    bus.subscribe(subject, TroupeEvent, (d) => options.onEvent(d.value), { reporter: 'cli:tail' }),
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

/** Resolves with a task's final event. */
export function waitForFinal(bus: NatsBus, taskId: string, onEvent: (event: TroupeEvent) => void) {
  let subscriptions: BusSubscription[] = [];
  const final = new Promise<TroupeEvent>((resolve) => {
    subscriptions = watchEvents(bus, {
      taskId,
      onEvent: (event) => {
        onEvent(event);
        if (FINAL_EVENT_KINDS.includes(event.kind)) resolve(event);
      },
    });
  });
  return {
    final,
    stop: () => {
      for (const s of subscriptions) s.unsubscribe();
    },
  };
}
