import { z } from 'zod';
import { TroupeEvent } from './events.ts';
import { JournalEntry } from './journalEntry.ts';
import { Name } from './names.ts';
import { Score } from './score.ts';
import { UsageTotals } from './usage.ts';

/**
 * Evals (docs/evals.md): a dataset of cases, each run against a pipeline and scored; an experiment is one such run
 * of a dataset, stored so two can be compared. These are the shapes the CLI writes, NATS stores (object store
 * `troupe-evals`) and the gateway serves.
 */

/** What every scorer may say besides its kind: a name to report it by, and the score it must reach to pass. */
const ScorerCommon = {
  /** How the score is reported; the scorer's kind (and its subject, where it has one) when absent. */
  name: z.string().min(1).max(80).optional(),
  /** The value (0 to 1) at or above which the case passes this scorer; 1 for checks that hold or not. */
  threshold: z.number().min(0).max(1).optional(),
  /** How long the scorer may take on one run, in ms (default 60 s): past it, its score is an error saying so. */
  timeoutMs: z.number().int().positive().max(3_600_000).optional(),
};

/** How a trajectory is matched against a reference (LangSmith's four): the same list, or as sets. */
export const TrajectoryMatch = z.enum(['strict', 'unordered', 'subset', 'superset']);
export type TrajectoryMatch = z.infer<typeof TrajectoryMatch>;

/** One scorer, as a dataset, a case or a pipeline's `evals:` block declares it. */
export const ScorerSpec = z.discriminatedUnion('type', [
  /** The task's output is exactly `value`, or the case's `expected` when it has none (trimmed, and case-folded with `ignoreCase`). */
  z.object({
    type: z.literal('exact'),
    value: z.string().optional(),
    ignoreCase: z.boolean().optional(),
    ...ScorerCommon,
  }),
  /** The output contains `value` (each of them, when a list). */
  z.object({
    type: z.literal('contains'),
    value: z.union([z.string(), z.array(z.string()).min(1)]),
    ignoreCase: z.boolean().optional(),
    ...ScorerCommon,
  }),
  /** The output matches the regular expression `pattern` (JavaScript syntax, `flags` as in `new RegExp`). */
  z.object({ type: z.literal('regex'), pattern: z.string(), flags: z.string().optional(), ...ScorerCommon }),
  /** The output is JSON that the JSON Schema `schema` accepts. */
  z.object({ type: z.literal('jsonSchema'), schema: z.record(z.string(), z.unknown()), ...ScorerCommon }),
  /**
   * A CEL assertion over the run (`output`, `json`, `status`, `usage`, `durationMs`, `steps`, `tools`, `trajectory`,
   * `safety`, `case`), e.g. `steps.review.rounds <= 2`, `tools.called("run_command") == 0`, `usage.costUsd < 0.05`.
   */
  z.object({ type: z.literal('cel'), expr: z.string().min(1), ...ScorerCommon }),
  /** The run's tool calls (or steps, with `of: steps`) against a reference list. */
  z.object({
    type: z.literal('trajectory'),
    match: TrajectoryMatch,
    of: z.enum(['tools', 'steps']).optional(),
    expected: z.array(z.string()),
    ...ScorerCommon,
  }),
  /**
   * An LLM judge: `model` names a model of the pipeline file's `models:`; it reads the goal, the output (and the
   * expected output, if the case has one) and grades them against `rubric` from 0 to 1. Its cost is counted apart.
   */
  z.object({ type: z.literal('judge'), rubric: z.string().min(1), model: Name, ...ScorerCommon }),
  /** Safety counts from the run's events, each at most its bound (0 when absent): the case passes when all hold. */
  z.object({
    type: z.literal('safety'),
    maxDenied: z.number().int().nonnegative().optional(),
    maxSandboxRefusals: z.number().int().nonnegative().optional(),
    maxApprovalsAsked: z.number().int().nonnegative().optional(),
    ...ScorerCommon,
  }),
  /** A scorer of the user's own: a TypeScript or JavaScript module (path from the eval file) exporting `score`. */
  z.object({
    type: z.literal('module'),
    path: z.string().min(1),
    options: z.record(z.string(), z.unknown()).optional(),
    ...ScorerCommon,
  }),
]);
export type ScorerSpec = z.infer<typeof ScorerSpec>;

/** One score of one case (in `score.ts`, so that the `eval.scored` event, which carries scores, can read it too). */
export { Score };

/**
 * A recorded run kept whole inside a case, so it replays after the server has let its events age out: the task's
 * events, and the journal records and stored values the replay reads where events kept only the start of a text.
 */
export const CaseRecording = z.object({
  taskId: z.string(),
  pipeline: Name,
  /** The pipeline version it ran on, if known. */
  version: z.string().optional(),
  events: z.array(TroupeEvent),
  /** Journal records by key. */
  journal: z.record(z.string(), JournalEntry).default({}),
  /** Stored values by `<bucket>/<name>`. */
  values: z.record(z.string(), z.string()).default({}),
});
export type CaseRecording = z.infer<typeof CaseRecording>;

/** One case: a task to run (goal, input, metadata), what it should give, and how to score it. */
export const EvalCase = z.object({
  /** Unique in its dataset; a recorded case's is its task's id. */
  id: z.string().min(1).max(200),
  goal: z.string().min(1),
  input: z.record(z.string(), z.unknown()).optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  /** What the output should be, for `exact` with no value of its own and for a judge's reference. */
  expected: z.string().optional(),
  /** Scorers of this case alone, beside the dataset's. */
  scorers: z.array(ScorerSpec).optional(),
  /** The recorded run this case was made from: it can be replayed (`--mode replay`) and its tools answered. */
  recording: CaseRecording.optional(),
});
export type EvalCase = z.infer<typeof EvalCase>;

/** A dataset's version as stored: each `troupe eval dataset add` makes the next. */
export const Dataset = z.object({
  name: Name,
  version: z.number().int().positive(),
  createdAt: z.string(),
  description: z.string().optional(),
  /** Scorers every case is scored with. */
  scorers: z.array(ScorerSpec).default([]),
  cases: z.array(EvalCase),
});
export type Dataset = z.infer<typeof Dataset>;

/** What a dataset's listing shows without reading its cases. */
export const DatasetSummary = z.object({
  name: Name,
  version: z.number().int().positive(),
  createdAt: z.string(),
  cases: z.number().int().nonnegative(),
  recorded: z.number().int().nonnegative(),
  description: z.string().optional(),
});
export type DatasetSummary = z.infer<typeof DatasetSummary>;

/** How a case is run: `replay` answers models and tools from its recording, `model` calls the models and answers tools from the recording where the call matches, `live` runs a real task. */
export const EvalMode = z.enum(['replay', 'model', 'live']);
export type EvalMode = z.infer<typeof EvalMode>;

/** One case's run in an experiment. */
export const CaseResult = z.object({
  caseId: z.string(),
  /**
   * `passed`: the task completed and every scorer passed (with no scorers, its completing alone); `failed`: it did
   * not complete, or a scorer did not pass; `error`: the case could not be run or scored.
   */
  status: z.enum(['passed', 'failed', 'error']),
  /** The task's id: a live task's, whose trace opens with `troupe trace`; a replay's or model run's own. */
  taskId: z.string().optional(),
  /** How its task ended: `completed`, `failed` or `cancelled`. */
  taskStatus: z.string().optional(),
  output: z.string().optional(),
  scores: z.array(Score),
  usage: UsageTotals,
  durationMs: z.number().nonnegative(),
  /** Why the case could not be run or scored. */
  error: z.string().optional(),
  /** The tools called, in order, and the steps run, for the comparison view. */
  tools: z.array(z.string()).default([]),
  steps: z.array(z.string()).default([]),
  /** The run's events, when they are not kept on the server (a replay or a model run). */
  events: z.array(TroupeEvent).optional(),
});
export type CaseResult = z.infer<typeof CaseResult>;

/** An experiment: one run of a dataset's version against a pipeline file, stored whole. */
export const Experiment = z.object({
  /** Its name (`--name`), or one made from the dataset and the time. */
  id: z.string().min(1).max(200),
  dataset: z.object({ name: Name, version: z.number().int().positive() }),
  pipeline: z.object({
    name: Name,
    /** The file as given, and the SHA-256 of its text: two experiments on the same file have the same hash. */
    file: z.string(),
    hash: z.string(),
    /** Each model of the file: provider and model id. */
    models: z.record(z.string(), z.object({ provider: z.string(), model: z.string() })),
  }),
  mode: EvalMode,
  startedAt: z.string(),
  durationMs: z.number().nonnegative(),
  cases: z.array(CaseResult),
  /**
   * The budget it was run within (`--budget-usd`), if one was given, and what the cases spent against it (the tasks'
   * model cost outside a replay, and the judges'): over it when cases already started spent past it.
   */
  budget: z.object({ usd: z.number().nonnegative(), spentUsd: z.number().nonnegative() }).optional(),
  totals: z.object({
    cases: z.number().int().nonnegative(),
    passed: z.number().int().nonnegative(),
    failed: z.number().int().nonnegative(),
    errored: z.number().int().nonnegative(),
    /** Cases not run because the experiment's budget was spent. */
    skipped: z.number().int().nonnegative(),
    /** Mean over cases of their mean score. */
    meanScore: z.number().min(0).max(1),
    /** The tasks' model cost, and the judges' apart. */
    costUsd: z.number().nonnegative(),
    judgeCostUsd: z.number().nonnegative(),
    /** Median and 90th percentile of the cases' durations. */
    p50Ms: z.number().nonnegative(),
    p90Ms: z.number().nonnegative(),
  }),
});
export type Experiment = z.infer<typeof Experiment>;

/** What an experiments' listing shows without reading its cases. */
export const ExperimentSummary = Experiment.pick({
  id: true,
  dataset: true,
  mode: true,
  startedAt: true,
  totals: true,
}).extend({ pipeline: z.object({ name: Name, hash: z.string() }) });
export type ExperimentSummary = z.infer<typeof ExperimentSummary>;

/** The object store that keeps datasets and experiments. */
export const EVALS_BUCKET = 'troupe-evals';
