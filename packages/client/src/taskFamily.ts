import { randomUUID } from 'node:crypto';
import type { TaskOrigin, TaskSubmission, TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { type JetStreamBus, permissionRefusal } from '@troupe/runtime/bus';
import { familyRepeatProblem, type MadeTask } from './familyRepeat.ts';
import { OperationError } from './operationError.ts';
import { originAsked } from './originAsked.ts';
import { PipelineRegistry } from './pipelineRegistry.ts';
import { reusePlan } from './reusedSteps.ts';
import { readTask, readTaskEvents, type SubmitOptions, submitToPipeline } from './taskOperations.ts';
import { CLIENT_WAIT, openWorkflowStore } from './troupeState.ts';

/** A task made from an ended one: its id, and the pipeline it runs in (the original's). */
export interface FamilyTask {
  taskId: string;
  pipeline: string;
}

/** What a restart or fork passes on to {@link submitToPipeline} for its new task. */
export type FamilySubmitOptions = Pick<SubmitOptions, 'values' | 'limits' | 'queued'>;

export interface RestartOptions {
  /** The step to run again, with every step after it; the ones before it are reused. */
  from: string;
  /** Who asked for it, kept in the new task's origin. */
  by?: string;
  /** The new task's id; a fresh one when absent. Given again, nothing new is run. */
  id?: string;
  /**
   * Run on the pipeline's newest version instead of the one the original ran on: after a fix to a prompt, a tool or
   * a model. Its steps before `from` must still be the original's for their outputs to be reused.
   */
  newest?: boolean;
  /**
   * How the new task is submitted: where a large input is stored, the coordinators' limits, and the gateway's queued
   * mark, so the new task can be read (as `submitted`) and cancelled before a coordinator claims it.
   */
  submit?: FamilySubmitOptions;
}

export interface ForkOptions {
  /** The step to run on from, with the edits; the steps before it are reused. */
  at: string;
  /** The new task's input, in place of the original's. */
  input?: Record<string, unknown>;
  /** Reused outputs to replace, by step id: each must be a step that completed before `at` started. */
  set?: Record<string, string>;
  by?: string;
  id?: string;
  /** Run on the pipeline's newest version (see {@link RestartOptions.newest}). */
  newest?: boolean;
  /** How the new task is submitted (see {@link RestartOptions.submit}). */
  submit?: FamilySubmitOptions;
}

/**
 * Runs a failed or cancelled task again from one of its steps, as a new task of the same pipeline (and version)
 * linked to it by its `origin`: the steps that completed before `from` first started are not run again (their
 * outputs are reused: no model call, no tool call, no person asked), and `from` and everything after it runs. The
 * original stays as it ended. Throws `not_found` for an unknown task, `conflict` for one still running (or one that
 * completed: fork it), `invalid_request` for a step it never started.
 *
 * @example
 * ```ts
 * const { taskId } = await restartTask(bus, 'task-42', { from: 'test' });
 * ```
 */
export async function restartTask(
  bus: JetStreamBus,
  taskId: string,
  options: RestartOptions,
): Promise<FamilyTask> {
  const record = await readTask(bus, taskId);
  if (record.status === 'running') {
    throw new OperationError(
      'conflict',
      `task ${taskId} is still running; restart it once it has ended (troupe cancel ${taskId} ends it now)`,
    );
  }
  if (record.status === 'completed') {
    throw new OperationError(
      'conflict',
      `task ${taskId} completed; nothing to restart. To run it again from a step, fork it: troupe fork ${taskId} --at ${options.from}`,
    );
  }
  const origin: TaskOrigin = {
    taskId,
    kind: 'restart',
    step: options.from,
    ...(options.newest ? { newest: true } : {}),
    ...(options.by ? { by: options.by } : {}),
  };
  return await makeFamilyTask(bus, record, origin, options);
}

/**
 * Starts a new task from an ended one at one of its steps, with its input replaced and/or some reused step outputs
 * edited: the steps that completed before `at` first started in the original are reused (edited where `set` says),
 * and `at` and everything after it runs, seeing the edits. Throws `not_found` for an unknown task, `conflict` for
 * one still running (fork it once it has ended), `invalid_request` for a step it never started or a `set` for a step
 * that is not reused.
 */
export async function forkTask(bus: JetStreamBus, taskId: string, options: ForkOptions): Promise<FamilyTask> {
  const record = await readTask(bus, taskId);
  if (record.status === 'running') {
    throw new OperationError(
      'conflict',
      `task ${taskId} is still running; fork it once it has ended (troupe cancel ${taskId} ends it now)`,
    );
  }
  const set = options.set && Object.keys(options.set).length > 0 ? options.set : undefined;
  const edited = [
    ...(options.input ? ['input'] : []),
    ...Object.keys(set ?? {}).map((step) => `steps.${step}.output`),
  ];
  const origin: TaskOrigin = {
    taskId,
    kind: 'fork',
    step: options.at,
    ...(set ? { set } : {}),
    ...(edited.length > 0 ? { edited } : {}),
    ...(options.newest ? { newest: true } : {}),
    ...(options.by ? { by: options.by } : {}),
  };
  return await makeFamilyTask(bus, record, origin, options);
}

/**
 * Why a step is not in the pipeline at all, when its registration (the newest version's) says so; undefined when it
 * is there (the task ended before reaching it) or the registration cannot be read.
 */
async function unknownStep(bus: JetStreamBus, pipeline: string, step: string): Promise<string | undefined> {
  const registration = await PipelineRegistry.open(bus, CLIENT_WAIT)
    .then((registry) => registry.get(pipeline))
    .catch(() => undefined);
  const steps = registration?.graph?.nodes.map((node) => node.id) ?? registration?.steps;
  if (!steps || steps.includes(step)) return undefined;
  return `pipeline ${pipeline} has no step ${JSON.stringify(step)}; its steps: ${steps.join(', ')}`;
}

/**
 * Submits the new task of a restart or fork, once the original's events show what it reuses: the original's goal,
 * metadata and input (its stored whole, when it was stored), or the fork's input.
 */
async function makeFamilyTask(
  bus: JetStreamBus,
  record: WorkflowRecord,
  origin: TaskOrigin,
  { id, submit, ...rest }: { id?: string; submit?: FamilySubmitOptions; input?: Record<string, unknown> },
): Promise<FamilyTask> {
  const { taskId, pipeline } = record;
  const input = rest.input;
  const refused = refusedTo(origin, pipeline);
  const events = await readTaskEvents(bus, taskId, pipeline).catch(
    refused(`read the stored events of pipeline ${pipeline}`),
  );
  const accepted = events.find(
    (e): e is Extract<TroupeEvent, { kind: 'task.accepted' }> => e.kind === 'task.accepted',
  );
  if (accepted?.data.parent) {
    throw new OperationError(
      'invalid_request',
      `task ${taskId} is a sub-task of task ${accepted.data.parent.taskId} (its step ${accepted.data.parent.step}); restart or fork that task`,
    );
  }
  if (!accepted) {
    throw new OperationError(
      'conflict',
      `the events of task ${taskId} are no longer kept (its task.accepted is gone from EVENTS); it cannot be restarted or forked`,
    );
  }
  const plan = reusePlan(events, origin);
  if (!plan.ok) {
    const unknown =
      plan.problem === 'not_started' ? await unknownStep(bus, pipeline, origin.step) : undefined;
    throw new OperationError(
      'invalid_request',
      `cannot ${origin.kind} task ${taskId}: ${unknown ?? plan.message}`,
    );
  }
  const original = accepted.data;
  // Its goal and input as it ran, not as task.accepted shows them: secrets there are redacted.
  const found = originAsked(record, original);
  if (!found.ok)
    throw new OperationError('conflict', `cannot ${origin.kind} task ${taskId}: ${found.problem}`);
  const { asked } = found;
  const task: TaskSubmission & { id: string } = {
    id: id ?? randomUUID(),
    goal: asked.goal,
    ...(input ? { input } : asked.input ? { input: asked.input } : {}),
    ...(original.metadata ? { metadata: original.metadata } : {}),
    origin,
  };
  // The original's input as it ran may hold previews of its stored whole: read whole before it goes again.
  const options: SubmitOptions = {
    ...submit,
    ...(!input && asked.inputCut ? { inputCut: asked.inputCut } : {}),
    // It runs on its origin's version, whose input schema may not be the newest's.
    ...(origin.newest || record.version === undefined ? {} : { version: record.version }),
  };
  // An id given again (an idempotency key's) answers the task it made, if that is this same restart or fork.
  const repeat = async () => {
    if (id === undefined) return undefined;
    const made = await madeTask(bus, id, submit);
    const problem = made && familyRepeatProblem(made, { origin, ...(input ? { input } : {}) });
    if (problem) {
      throw new OperationError(
        'conflict',
        `task id ${id} (from its idempotency key) cannot be used for a ${origin.kind} of task ${taskId} from step ${origin.step}: ${problem}; use another key`,
      );
    }
    return made;
  };
  if (await repeat()) return { taskId: task.id, pipeline };
  const submitted = await submitToPipeline(bus, pipeline, task, options).catch(
    refused(`submit tasks to pipeline ${pipeline}`),
  );
  // Made meanwhile by another request with the same id: it is compared once it can be read.
  if (submitted.duplicate) await repeat();
  return { taskId: submitted.taskId, pipeline };
}

/**
 * A step of a restart or fork that the NATS server refused this client's user (its role may not read the origin's
 * stored events, or submit to its pipeline), said plainly with the role that may: nats.js says only "Permissions
 * Violation". Any other failure is thrown as it is.
 */
const refusedTo =
  (origin: TaskOrigin, pipeline: string) =>
  (what: string) =>
  (error: unknown): never => {
    const refusal = permissionRefusal(error);
    if (refusal === undefined) throw error;
    throw new OperationError(
      'unavailable',
      `this NATS user may not ${what}, so it may not ${origin.kind} task ${origin.taskId} (${refusal.message}); ` +
        `a submitter of pipeline ${pipeline} may (docs/permissions.md)`,
      { cause: error },
    );
  };

/** The task an id names already: its record, else its queued mark (when the submitter marks its tasks). */
async function madeTask(
  bus: JetStreamBus,
  id: string,
  submit: FamilySubmitOptions | undefined,
): Promise<MadeTask | undefined> {
  const record = (await (await openWorkflowStore(bus)).get(id))?.value;
  if (record) return { record };
  const mark = (await submit?.queued?.store.get(id))?.value;
  return mark ? { mark } : undefined;
}
