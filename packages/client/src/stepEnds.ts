import type { EventOf, TroupeEvent } from '@troupe/protocol';

/**
 * Each step run's last end (`step.completed`) among `events`, by step run id, in the order of those last ends; with
 * `keep`, of the ends it keeps. A run whose final reply was asked again after a crash can end twice, each end under
 * its own id, and the task went on with the later one (docs/durability.md, "A local step's final reply").
 */
export function lastStepEnds(
  events: readonly TroupeEvent[],
  keep: (end: EventOf<'step.completed'>) => boolean = () => true,
): Map<string, EventOf<'step.completed'>> {
  const ends = new Map<string, EventOf<'step.completed'>>();
  for (const event of events) {
    if (event.kind !== 'step.completed' || !keep(event)) continue;
    // Taken out first, so the map's order is that of the last ends.
    ends.delete(event.data.stepId);
    ends.set(event.data.stepId, event);
  }
  return ends;
}
