import { carriedManifest, type TroupeEvent, type WorkspaceManifest } from '@troupe/protocol';
import { firstStarted } from './reusedSteps.ts';

/**
 * The workspace a restart or fork starts with: its origin's files as the step it runs from first started there, or
 * none, and, for its `task.accepted`, how many and how large they are, or why none are carried.
 */
export interface ReusedWorkspace {
  /**
   * The manifest the new task's first step is sent with: each entry names the task whose object holds the file, so
   * no byte is copied. Absent when nothing is carried.
   */
  manifest?: WorkspaceManifest;
  files: number;
  bytes: number;
  /** Why no file is carried, when none is and the origin may have had some. */
  note?: string;
}

/**
 * What workspace a restart or fork from `origin.step` starts with, read from its origin's events: the manifest the
 * origin's `step.started` of that step recorded (the first started inside it, for a parallel or foreach step), which
 * holds the files every step that ended before it handed on, the reused steps' among them. Files are carried only
 * where the origin handed them on (`workspace.handOff`): without it they stayed on the disks of the hosts that ran
 * its steps, as they were when it ended, not as they were when the step started, so none is carried and `note` says
 * so.
 */
export function reusedWorkspace(
  events: readonly TroupeEvent[],
  origin: { taskId: string; step: string },
): ReusedWorkspace {
  const { taskId, step } = origin;
  const at = firstStarted(events, step);
  const start = events[at];
  const own = start?.kind === 'step.started' ? start.data.workspace : undefined;
  const items = itemsHandedOn(events, at);
  const recorded = own === undefined && Object.keys(items).length === 0 ? undefined : { ...items, ...own };
  if (recorded === undefined) {
    // A later step's record shows files were handed on, just none before this step: nothing to carry.
    if (events.some((e) => e.kind === 'step.started' && e.data.workspace !== undefined))
      return { files: 0, bytes: 0 };
    return {
      files: 0,
      bytes: 0,
      note: `no workspace files are carried from task ${taskId}: its events record none handed on before step ${step} started (its pipeline did not hand files between steps, with workspace.handOff, or its steps wrote none), so any files its steps wrote stayed on the disks of the hosts that ran them; a step that needs them must make them again`,
    };
  }
  const bytes = Object.values(recorded).reduce((sum, file) => sum + file.bytes, 0);
  return { manifest: carriedManifest(recorded, taskId), files: Object.keys(recorded).length, bytes };
}

/**
 * The files the foreach items at work when `start` began had handed on by then: an item's workflow keeps its manifest
 * to itself until the item ends, so a step of another item (the one `start` records) lacks them, yet the new task
 * reuses those runs and must have their files. For each item, the `step.started` that followed its last run completed
 * before `start` records them (an item that had ended by then handed them on to the flow, as its end merged them).
 * Where a path is in both, the caller keeps the record at `start`.
 */
function itemsHandedOn(events: readonly TroupeEvent[], start: number): WorkspaceManifest {
  const places = new Map(
    events.flatMap((e) => (e.kind === 'step.started' ? [[e.data.stepId, e.data.within ?? []]] : [])),
  );
  /** An item's innermost scope (as JSON), with how deep it is, and where its last run before `start` completed. */
  const lastRun = new Map<string, { depth: number; at: number }>();
  for (let at = 0; at < start; at++) {
    const event = events[at];
    if (event?.kind !== 'step.completed' || !event.data.ok) continue;
    const within = places.get(event.data.stepId) ?? [];
    const depth = within.findLastIndex((scope) => scope.item !== undefined) + 1;
    if (depth > 0) lastRun.set(JSON.stringify(within.slice(0, depth)), { depth, at });
  }
  const found: WorkspaceManifest = {};
  for (const [scope, { depth, at }] of lastRun) {
    const next = events
      .slice(at + 1)
      .find(
        (later) =>
          later.kind === 'step.started' &&
          JSON.stringify((later.data.within ?? []).slice(0, depth)) === scope,
      );
    if (next?.kind === 'step.started' && next.data.workspace) Object.assign(found, next.data.workspace);
  }
  return found;
}

/**
 * The workspace as the new task takes it on the pipeline version it runs on: with `handOff` there as offered, else
 * none (its steps would not read them), saying so.
 */
export function workspaceOnVersion(
  reused: ReusedWorkspace,
  origin: { taskId: string; step: string },
  handOff: boolean,
): ReusedWorkspace {
  if (handOff || reused.manifest === undefined) return reused;
  return {
    files: 0,
    bytes: 0,
    note: `the ${reused.files} workspace files task ${origin.taskId} handed on before step ${origin.step} started are not carried: the pipeline version this task runs on does not hand files between steps (workspace.handOff)`,
  };
}
