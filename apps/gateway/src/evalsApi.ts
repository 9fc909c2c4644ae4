import {
  CaseRecording,
  CaseResult,
  Dataset,
  DatasetSummary,
  EvalCase,
  Experiment,
  ExperimentSummary,
  Name,
  TroupeEvent,
} from '@troupe/protocol';
import { z } from 'zod';

/**
 * The bodies of the gateway's eval routes (`/v1/evals/…`, docs/gateway.md): what they take in their path and query,
 * and the protocol's dataset and experiment shapes (docs/evals.md) they answer with, named for the OpenAPI document.
 */

export const DatasetParams = z.object({ name: Name });
export type DatasetParams = z.infer<typeof DatasetParams>;

export const DatasetQuery = z.object({
  /** The version to read; the newest when absent. */
  version: z.coerce.number().int().positive().optional(),
});
export type DatasetQuery = z.infer<typeof DatasetQuery>;

/** An experiment's id, as `troupe eval run --name` gives it or one made from the dataset and the time. */
const ExperimentId = z.string().min(1).max(200);

export const ExperimentParams = z.object({ id: ExperimentId });
export type ExperimentParams = z.infer<typeof ExperimentParams>;

export const CaseParams = z.object({ id: ExperimentId, caseId: z.string().min(1).max(200) });
export type CaseParams = z.infer<typeof CaseParams>;

/** The two experiments to compare: `a` the baseline, `b` the one judged against it. */
export const CompareQuery = z.object({ a: ExperimentId, b: ExperimentId });
export type CompareQuery = z.infer<typeof CompareQuery>;

/**
 * A Troupe event, one component of the OpenAPI document that a dataset's recordings and an experiment's cases refer
 * to (inlined in each, the document was four times as large).
 */
const EventBody = TroupeEvent.meta({ id: 'Event' });
const Events = z.array(EventBody);

export const DatasetBody = Dataset.extend({
  cases: z.array(EvalCase.extend({ recording: CaseRecording.extend({ events: Events }).optional() })),
}).meta({ id: 'Dataset' });
export const ExperimentBody = Experiment.extend({
  cases: z.array(CaseResult.extend({ events: Events.optional() })),
}).meta({ id: 'Experiment' });

/** Every version of every dataset, newest first, without their cases. */
export const DatasetList = z.object({ datasets: z.array(DatasetSummary) }).meta({ id: 'DatasetList' });
export type DatasetList = z.infer<typeof DatasetList>;

/** The experiments stored, newest first, without their cases. */
export const ExperimentList = z
  .object({ experiments: z.array(ExperimentSummary) })
  .meta({ id: 'ExperimentList' });
export type ExperimentList = z.infer<typeof ExperimentList>;

export const ScoresQuery = z.object({
  /** Scores published at or after this time (ISO 8601): the oldest task the list shows. */
  since: z.iso.datetime({ offset: true }),
  pipeline: Name.optional(),
});
export type ScoresQuery = z.infer<typeof ScoresQuery>;

/** A task's online score (its `eval.scored` event) as the task list shows it. */
export const TaskScore = z.object({
  taskId: z.string(),
  pipeline: Name,
  /** When it was scored. */
  ts: z.string(),
  /** How the task ended. */
  status: z.enum(['completed', 'failed', 'cancelled']),
  /** Every scorer passed (false with none, or with `error`). */
  pass: z.boolean(),
  /** The mean of its scores' values (0 with none). */
  meanScore: z.number().min(0).max(1),
  /** How many scorers scored it, and those that failed. */
  scorers: z.number().int().nonnegative(),
  failed: z.array(z.string()),
  /** Why the task could not be scored at all. */
  error: z.string().optional(),
});
export type TaskScore = z.infer<typeof TaskScore>;

export const TaskScoreList = z.object({ scores: z.array(TaskScore) }).meta({ id: 'TaskScoreList' });
export type TaskScoreList = z.infer<typeof TaskScoreList>;
