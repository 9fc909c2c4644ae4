import type { TroupeEvent, ValueRef, Verdict } from '@troupe/protocol';
import { lastStepEnds } from './stepEnds.ts';

/** A step's output that a restart or fork reuses, as the original task's `step.completed` recorded it. */
export interface ReusedStep {
  step: string;
  agent: string;
  output: string;
  outputRef?: ValueRef;
  /** A review's verdict, reused with its output. */
  verdict?: Verdict;
  /** A fork replaced the output (`--set steps.<id>.output=…`). */
  edited?: true;
  /** A `pipeline` step's: the sub-task of the original that gave the output, which the new task's step names. */
  subTask?: { taskId: string; pipeline: string };
  /**
   * A run inside a foreach step: the item it ran for, by foreach step id, as its `step.started` recorded it (the
   * item's start as JSON). A fork that edits the list reuses the run only for the same item at the same place.
   */
  items?: Record<string, string>;
}

/**
 * What a restart or fork reuses, by step run: `<step>.<round>`, and `.i<index>` for a foreach item's run (the key a
 * step id has without its task id and retry). Plain data, kept in the new task's checkpoint.
 */
export type ReusedSteps = Record<string, ReusedStep>;

/** The outputs to reuse, or why there can be none: the step never started, or a `set` names a step not reused. */
export type ReusePlan =
  | { ok: true; steps: ReusedSteps }
  | {
      ok: false;
      problem: 'not_started' | 'not_reused' | 'answered_by_person';
      message: string;
      started?: string[];
    };

/**
 * The key of a step run from its step id (`<taskId>.<step>.<round>[-r<n>][.i<index>]`): the same run of the same step
 * in the original and in its restart or fork, whatever their task ids, and whichever retry of it succeeded.
 */
export function reuseKey(taskId: string, stepId: string): string {
  const run = stepId.startsWith(`${taskId}.`) ? stepId.slice(taskId.length + 1) : stepId;
  return run.replace(/-r\d+(?=(\.i\d+)?$)/, '');
}

/**
 * Which step outputs of an ended task a restart or fork from `from` reuses, read from the task's events: every step
 * that completed well before `from` first started (`from` itself, or the first step inside it when it is a parallel
 * or foreach step) — agent, review, route, human and `pipeline` steps (a sub-task's output, with which sub-task gave
 * it), each run's output from its last good `step.completed`. `set` replaces reused outputs, by step id (each reused
 * run of that step); a step it names must be reused.
 */
export function reusePlan(
  events: readonly TroupeEvent[],
  origin: {
    taskId: string;
    step: string;
    set?: Record<string, string> | undefined;
    edited?: readonly string[] | undefined;
  },
): ReusePlan {
  const { taskId, step: from } = origin;
  const start = firstStarted(events, from);
  if (start < 0) {
    const started = [...new Set(events.flatMap((e) => (e.kind === 'step.started' ? [e.data.step] : [])))];
    return {
      ok: false,
      problem: 'not_started',
      message: `step ${JSON.stringify(from)} never started in task ${taskId}; its steps that started: ${started.join(', ') || 'none'}`,
      started,
    };
  }
  const subTasks = new Map(
    events.flatMap((e) =>
      e.kind === 'step.started' && e.data.subTask ? [[e.data.stepId, e.data.subTask]] : [],
    ),
  );
  const items = new Map(
    events.flatMap((e) => (e.kind === 'step.started' ? [[e.data.stepId, itemsOf(e.data.within)]] : [])),
  );
  // A step run's last good end, wherever it was stored: the later end of a run that ended twice is stored after
  // `from` first started.
  const lastEnds = lastStepEnds(events, (end) => end.data.ok);
  const steps: ReusedSteps = {};
  for (const ended of events.slice(0, start)) {
    if (ended.kind !== 'step.completed' || !ended.data.ok) continue;
    const event = lastEnds.get(ended.data.stepId) ?? ended;
    const { step, agent, output, outputRef, verdict } = event.data;
    const subTask = subTasks.get(event.data.stepId);
    const itemsRun = items.get(event.data.stepId);
    steps[reuseKey(taskId, event.data.stepId)] = {
      step,
      agent,
      output,
      ...(outputRef ? { outputRef } : {}),
      ...(verdict ? { verdict } : {}),
      ...(subTask ? { subTask: { taskId: subTask.taskId, pipeline: subTask.pipeline } } : {}),
      ...(itemsRun ? { items: itemsRun } : {}),
    };
  }
  return withEdits(steps, origin);
}

/**
 * Where step `from` first started among a task's events: its `step.started`, or, for a parallel or foreach step, that
 * of the first step inside it; -1 when it never started.
 */
export function firstStarted(events: readonly TroupeEvent[], from: string): number {
  return events.findIndex(
    (event) =>
      event.kind === 'step.started' &&
      (event.data.step === from || (event.data.within ?? []).some((scope) => scope.step === from)),
  );
}

/** The items a step run's place names, by foreach step; undefined outside any foreach. */
function itemsOf(
  within: readonly { step: string; item?: number | undefined; value?: string | undefined }[] | undefined,
): Record<string, string> | undefined {
  const named = (within ?? []).flatMap((scope) =>
    scope.item !== undefined && scope.value !== undefined ? [[scope.step, scope.value] as const] : [],
  );
  return named.length > 0 ? Object.fromEntries(named) : undefined;
}

/**
 * The reused steps with a fork's `set` applied; refused when it names a step that is not reused, or a human step. A
 * person's answer given after what a fork edits (its input, or a step it sets) is not reused: the person is asked
 * again, about what the fork changed, so no approval carries over to what its approver never saw.
 */
function withEdits(
  steps: ReusedSteps,
  {
    taskId,
    step: from,
    set,
    edited: editedFields,
  }: {
    taskId: string;
    step: string;
    set?: Record<string, string> | undefined;
    edited?: readonly string[] | undefined;
  },
): ReusePlan {
  // The task's goal or input changed: every answer a person gave was about the original's.
  const taskEdited = editedFields?.some((field) => field === 'input' || field === 'goal') === true;
  if (set === undefined && !taskEdited) return { ok: true, steps };
  const reused = new Set(Object.values(steps).map((s) => s.step));
  const stray = Object.keys(set ?? {}).filter((id) => !reused.has(id));
  if (stray.length > 0) {
    return {
      ok: false,
      problem: 'not_reused',
      message: `cannot set the output of ${stray.map((id) => `step ${JSON.stringify(id)}`).join(', ')}: only a step that completed in task ${taskId} before ${JSON.stringify(from)} started is reused, and can be set (reused: ${[...reused].join(', ') || 'none'})`,
    };
  }
  // A human step's output is a person's answer (a gate the approve scope opens): whoever may fork must not write it.
  const people = Object.keys(set ?? {}).filter((id) =>
    Object.values(steps).some((s) => s.step === id && s.agent === 'human'),
  );
  if (people.length > 0) {
    return {
      ok: false,
      problem: 'answered_by_person',
      message: `cannot set the output of ${people.map((id) => `step ${JSON.stringify(id)}`).join(', ')}: step ${JSON.stringify(people[0])} is a person's answer, which only a person gives; to answer it again, fork at ${JSON.stringify(people[0])}`,
    };
  }
  const edited: ReusedSteps = {};
  // In the order the original completed them: an answer given after an edit was to something else.
  let afterEdit = taskEdited;
  for (const [key, reusedStep] of Object.entries(steps)) {
    if (afterEdit && reusedStep.agent === 'human') continue;
    const text = set?.[reusedStep.step];
    if (text === undefined) {
      edited[key] = reusedStep;
      continue;
    }
    // The edit is the whole output: the original's stored whole (outputRef) is not it.
    const { outputRef: _whole, ...rest } = reusedStep;
    edited[key] = { ...rest, output: text, edited: true };
    afterEdit = true;
  }
  return { ok: true, steps: edited };
}
