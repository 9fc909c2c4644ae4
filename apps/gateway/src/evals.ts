import { buildTaskTrace, CLIENT_WAIT, OperationError, type TaskTrace } from '@troupe/client';
import {
  type Dataset,
  type DatasetSummary,
  type EventOf,
  type Experiment,
  type ExperimentSummary,
  subjects,
} from '@troupe/protocol';
import { type JetStreamBus, readEventHistory, TransportError } from '@troupe/runtime/bus';
import type { GatewayActions } from './actions.ts';
import { AuthRefusal, authorize, mayTouch, type Principal } from './auth.ts';
import type { TaskScore } from './evalsApi.ts';

/** What the gateway reads of the stored evals (`EvalStore` of `@troupe/client`, on the `troupe-evals` bucket). */
export interface EvalReader {
  datasets(): Promise<DatasetSummary[]>;
  dataset(name: string, version?: number): Promise<Dataset | undefined>;
  experiments(): Promise<ExperimentSummary[]>;
  experiment(id: string): Promise<Experiment | undefined>;
}

/**
 * Datasets, experiments and their comparison as the gateway serves them, checked against the caller's token: the
 * read scope; an experiment is seen only by a token that may touch its pipeline (as a task is: any other is told it
 * does not exist); a dataset, whose recorded runs may be of any pipeline, only by a token limited to none.
 */
export class GatewayEvals<Comparison> {
  readonly #bus: JetStreamBus;
  readonly #store: () => EvalReader;
  readonly #compare: (a: Experiment, b: Experiment) => Comparison;
  readonly #actions: GatewayActions;

  /** `store` is asked for when a request first needs it: a gateway over a bus without NATS serves no evals. */
  constructor(options: {
    bus: JetStreamBus;
    store: () => EvalReader;
    compare: (a: Experiment, b: Experiment) => Comparison;
    actions: GatewayActions;
  }) {
    this.#bus = options.bus;
    this.#store = options.store;
    this.#compare = options.compare;
    this.#actions = options.actions;
  }

  async datasets(who: Principal): Promise<DatasetSummary[]> {
    datasetReader(who);
    return this.#store().datasets();
  }

  async dataset(who: Principal, name: string, version?: number): Promise<Dataset> {
    datasetReader(who);
    const found = await this.#store().dataset(name, version);
    if (found) return found;
    if (version === undefined) throw new OperationError('not_found', `no dataset ${name} is stored`);
    const versions = (await this.#store().datasets()).filter((d) => d.name === name).map((d) => d.version);
    throw new OperationError(
      'not_found',
      versions.length === 0
        ? `no dataset ${name} is stored`
        : `dataset ${name} has no version ${version} (it has ${versions.sort((x, y) => x - y).join(', ')})`,
    );
  }

  async experiments(who: Principal): Promise<ExperimentSummary[]> {
    authorize(who, 'read');
    return (await this.#store().experiments()).filter((e) => mayTouch(who, e.pipeline.name));
  }

  async experiment(who: Principal, id: string): Promise<Experiment> {
    authorize(who, 'read');
    const found = await this.#store().experiment(id);
    if (!found || !mayTouch(who, found.pipeline.name))
      throw new OperationError('not_found', `no experiment ${id} is stored`);
    return found;
  }

  /** Experiment `b` against `a`, per case and in sum. */
  async compare(who: Principal, a: string, b: string): Promise<Comparison> {
    const [first, second] = await Promise.all([this.experiment(who, a), this.experiment(who, b)]);
    return this.#compare(first, second);
  }

  /**
   * A case's timeline: the trace of its stored events (a replay's or model run's, which the server never kept), or
   * of its live task as `GET /v1/tasks/{id}/trace` gives it.
   */
  async caseTrace(who: Principal, id: string, caseId: string): Promise<TaskTrace> {
    const experiment = await this.experiment(who, id);
    const result = experiment.cases.find((c) => c.caseId === caseId);
    if (!result) throw new OperationError('not_found', `experiment ${id} has no case ${caseId}`);
    const events = result.events ?? [];
    if (events.length > 0) {
      const taskId =
        events.find((e) => e.kind === 'task.accepted')?.taskId ?? result.taskId ?? events[0]?.taskId ?? '';
      return buildTaskTrace(taskId, events);
    }
    if (result.taskId) return this.#actions.trace(who, result.taskId);
    throw new OperationError(
      'not_found',
      `case ${caseId} of experiment ${id} has no timeline: it kept no events and ran no task${result.error ? ` (${result.error})` : ''}`,
    );
  }
}

/**
 * The online scores (`eval.scored`, one per sampled task) published since `since`, of the pipelines the token may
 * touch (of `pipeline` alone, when given), newest first: what the task list shows beside each task. A server no
 * coordinator has run on has none.
 */
export async function onlineScores(
  bus: JetStreamBus,
  who: Principal,
  query: { since: Date; pipeline?: string | undefined },
): Promise<TaskScore[]> {
  authorize(who, 'read', query.pipeline);
  const scores = new Map<string, TaskScore>();
  const subject = subjects.event(query.pipeline ?? '*', '*', 'eval.scored');
  try {
    for await (const stored of readEventHistory(bus, { subject, since: query.since, wait: CLIENT_WAIT })) {
      if (stored.type !== 'event' || stored.event.kind !== 'eval.scored') continue;
      const event = stored.event as EventOf<'eval.scored'>;
      // The stream keeps a task's first score (its id is the task's): a later copy says nothing new.
      if (scores.has(event.taskId) || !mayTouch(who, event.pipeline)) continue;
      scores.set(event.taskId, taskScore(event));
    }
  } catch (error) {
    if (TransportError.is(error, 'stream_missing')) return [];
    if (TransportError.is(error)) throw new OperationError('unavailable', error.message, { cause: error });
    throw error;
  }
  return [...scores.values()].reverse();
}

/** What the task list shows of a task's online score. */
export function taskScore(event: EventOf<'eval.scored'>): TaskScore {
  const { scores } = event.data;
  return {
    taskId: event.taskId,
    pipeline: event.pipeline,
    ts: event.ts,
    status: event.data.status,
    pass: event.data.pass,
    meanScore: scores.length === 0 ? 0 : scores.reduce((sum, s) => sum + s.value, 0) / scores.length,
    scorers: scores.length,
    failed: scores.filter((s) => !s.pass).map((s) => s.scorer),
    ...(event.data.error === undefined ? {} : { error: event.data.error }),
  };
}

/** Refuses a token without the read scope, or limited to some pipelines: a dataset may hold runs of any pipeline. */
function datasetReader(who: Principal): void {
  authorize(who, 'read');
  if (who.pipelines !== undefined) {
    throw new AuthRefusal(
      403,
      `token ${who.name} may touch only pipelines ${who.pipelines.join(', ')}; datasets may hold runs of any pipeline, so only a token without a pipeline list reads them`,
    );
  }
}
