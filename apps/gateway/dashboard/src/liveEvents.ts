import { useEffect, useRef } from 'preact/hooks';
import type { TroupeEvent } from './client.ts';

/**
 * The page's one event stream, passed on to the views that follow a task (a session's turns, a task's files): the
 * page holds one `/v1/events` stream per token, so views listen here rather than open streams of their own.
 */
const listeners = new Set<(event: TroupeEvent) => void>();

export const liveEvents = {
  /** Called by the page for each event its stream delivers. */
  emit(event: TroupeEvent): void {
    for (const listener of listeners) listener(event);
  },
};

/** Calls `onEvent` with each live event while the component is mounted; the latest `onEvent` is the one called. */
export function useLiveEvents(onEvent: (event: TroupeEvent) => void): void {
  const latest = useRef(onEvent);
  latest.current = onEvent;
  useEffect(() => {
    const listener = (event: TroupeEvent) => latest.current(event);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }, []);
}
