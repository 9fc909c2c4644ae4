import {
  EvalStore,
  mergeCases,
  type RecordedSelect,
  readValues,
  recordedCases,
  type SkippedTask,
  tasksToRecord,
  workflowStoreIfAny,
} from '@troupe/client';
import { type DatasetFile, DatasetFileError, readDatasetFile, suggestion } from '@troupe/coordinator';
import { type Dataset, type EvalCase, isName, type ScorerSpec } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { alignColumns } from '../format/table.ts';
import { CliError, connectCli, type ServerOptions } from '../server.ts';

export interface DatasetAddOptions extends ServerOptions {
  file: string[];
  fromRuns: boolean;
  pipeline?: string;
  status?: string;
  /** Milliseconds back from now: only tasks created since. */
  since?: number;
  limit: number;
  tasks?: string;
  description?: string;
  /** Scorers (by name, or by type for one without a name) the new version goes without. */
  removeScorer: string[];
  /** Cases (by id) the new version goes without. */
  removeCase: string[];
}

export interface DatasetListOptions extends ServerOptions {
  json: boolean;
}

const STATUSES = ['completed', 'failed', 'cancelled'] as const;
type EndedStatus = (typeof STATUSES)[number];

/**
 * `troupe eval dataset add <name>`: a new version of the dataset holding the previous version's cases and the new
 * ones (from files, from recorded runs, from tasks named), a new case replacing an old one of the same id, less the
 * scorers and cases removed. A file's scorers are made first (no pipeline yet): one that cannot be made is refused.
 * Says what it stored, each task it skipped with why, and when --limit left matching tasks out. Exit 2 when nothing
 * could be added.
 */
export async function add(name: string, options: DatasetAddOptions): Promise<number> {
  if (!isName(name)) {
    throw new CliError(
      `"${name}" is not a dataset name: 1-63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit`,
      2,
    );
  }
  const taskIds = options.tasks === undefined ? undefined : idsOf(options.tasks);
  const removeScorers = new Set(options.removeScorer ?? []);
  const removeCases = new Set(options.removeCase ?? []);
  const removing = removeScorers.size > 0 || removeCases.size > 0;
  if (options.file.length === 0 && !options.fromRuns && taskIds === undefined && !removing)
    throw new CliError(
      'nothing to add: give --file <path>, --from-runs --pipeline <name> or --tasks <id,id> (or --remove-scorer, --remove-case)',
      2,
    );
  if (options.fromRuns && options.pipeline === undefined)
    throw new CliError('--from-runs takes the tasks of one pipeline: give --pipeline <name>', 2);
  const status = options.status === undefined ? undefined : statusNamed(options.status);
  // Files are read, and their problems said, before anything connects.
  const files = await Promise.all(options.file.map(readFile));

  const bus = await connectCli(options, 'troupe-eval-dataset');
  try {
    const store = new EvalStore(bus);
    const added: EvalCase[] = files.flatMap((f) => f.cases);
    const skipped: SkippedTask[] = [];
    const take = async (select: RecordedSelect) => {
      const recorded = await recordedCases(bus, select);
      added.push(...recorded.cases);
      skipped.push(...recorded.skipped);
      return recorded.cases.length + recorded.skipped.length;
    };
    let cut: string | undefined;
    if (options.fromRuns) {
      const select: RecordedSelect = {
        ...(options.pipeline === undefined ? {} : { pipeline: options.pipeline }),
        ...(status === undefined ? {} : { status }),
        ...(options.since === undefined ? {} : { since: new Date(Date.now() - options.since) }),
        limit: options.limit,
      };
      const taken = await take(select);
      if (taken >= options.limit) {
        const matched = await tasksMatching(bus, select);
        if (matched > taken)
          cut = `took the newest ${taken} of ${matched} tasks that matched; --limit to take more\n`;
      }
    }
    if (taskIds !== undefined)
      await take({ taskIds, ...(options.pipeline === undefined ? {} : { pipeline: options.pipeline }) });
    for (const { taskId, why } of skipped) process.stderr.write(`skipped task ${taskId}: ${why}\n`);
    if (cut) process.stderr.write(cut);
    // Made from the newest version, again from a newer one if another writer stores one meanwhile.
    let merged: ReturnType<typeof mergeCases> = { cases: [], added: 0, replaced: 0 };
    let newScorers = 0;
    let removed: Removed = { scorers: [], cases: [] };
    const { dataset, previous } = await store.addDataset(name, async (previous) => {
      const kept = without(name, previous, removeScorers, removeCases);
      removed = kept.removed;
      const scorers = mergeScorers(kept.scorers, files);
      newScorers = scorers.length - kept.scorers.length;
      merged = mergeCases(kept.cases, added);
      const changed = added.length > 0 || newScorers > 0 || removing;
      if (!changed || merged.cases.length === 0) {
        const fileScorers = files.reduce((n, f) => n + f.scorers.length, 0);
        throw new CliError(
          `nothing to add to dataset ${name}: ${
            options.fromRuns && skipped.length === 0
              ? await noRunsFound(bus, options, status)
              : merged.cases.length === 0 && kept.cases.length === 0 && removeCases.size > 0
                ? 'it would have no cases left'
                : added.length === 0 && newScorers > 0
                  ? 'scorers alone, and it has no cases yet'
                  : added.length === 0 && fileScorers > 0 && !options.fromRuns && taskIds === undefined
                    ? alreadyThere(options.file, fileScorers)
                    : 'no case was made'
          }; no version was stored`,
          2,
        );
      }
      const description =
        options.description ?? previous?.description ?? files.find((f) => f.description)?.description;
      return {
        name,
        ...(description === undefined ? {} : { description }),
        scorers,
        cases: merged.cases,
      };
    });
    const recorded = dataset.cases.filter((c) => c.recording).length;
    const { scorers: scorersRemoved, cases: casesRemoved } = removed;
    process.stdout.write(
      `stored dataset ${name} version ${dataset.version}: ${count(dataset.cases.length, 'case')} (${recorded} recorded); ` +
        `${merged.added} added, ${merged.replaced} replaced` +
        `${casesRemoved.length > 0 ? `, ${casesRemoved.length} removed (${casesRemoved.join(', ')})` : ''}` +
        `${previous ? ` since version ${previous.version}` : ''}` +
        `${newScorers > 0 ? `, ${count(newScorers, 'scorer')} added` : ''}` +
        `${scorersRemoved.length > 0 ? `, ${count(scorersRemoved.length, 'scorer')} removed (${scorersRemoved.join(', ')})` : ''}` +
        `${skipped.length > 0 ? `, ${count(skipped.length, 'task')} skipped` : ''}\n`,
    );
    return 0;
  } finally {
    await bus.close();
  }
}

/** `troupe eval dataset list`: every version of every dataset, the newest first. */
export async function list(options: DatasetListOptions): Promise<number> {
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-eval-dataset');
  try {
    const summaries = await new EvalStore(bus).datasets();
    if (options.json) {
      for (const summary of summaries) process.stdout.write(`${JSON.stringify(summary)}\n`);
      return 0;
    }
    if (summaries.length === 0) {
      process.stdout.write('no datasets; troupe eval dataset add makes one\n');
      return 0;
    }
    const rows = [
      ['DATASET', 'VERSION', 'CASES', 'RECORDED', 'CREATED', 'DESCRIPTION'],
      ...summaries.map((d) => [
        d.name,
        String(d.version),
        String(d.cases),
        String(d.recorded),
        d.createdAt.slice(0, 19).replace('T', ' '),
        d.description ?? '',
      ]),
    ];
    for (const line of alignColumns(rows, { right: [1, 2, 3] })) process.stdout.write(`${line.trimEnd()}\n`);
    return 0;
  } finally {
    await bus.close();
  }
}

/** `troupe eval dataset show <name>[@<version>]`: a version's scorers and cases, or the whole of it as JSON. */
export async function show(ref: string, options: DatasetListOptions): Promise<number> {
  exitWhenStdoutCloses();
  const { name, version } = datasetRef(ref);
  const bus = await connectCli(options, 'troupe-eval-dataset');
  try {
    const store = new EvalStore(bus);
    const dataset = await store.dataset(name, version);
    if (!dataset) throw new CliError(await notStored(store, name, version), 1);
    if (options.json) {
      process.stdout.write(`${JSON.stringify(dataset)}\n`);
      return 0;
    }
    process.stdout.write(describeDataset(dataset));
    return 0;
  } finally {
    await bus.close();
  }
}

/** A dataset as `show` prints it: a header, its scorers, and a line per case. */
export function describeDataset(dataset: Dataset): string {
  const recorded = dataset.cases.filter((c) => c.recording).length;
  const lines = [
    `dataset ${dataset.name} version ${dataset.version}, made ${dataset.createdAt}: ${count(dataset.cases.length, 'case')}, ${recorded} recorded`,
  ];
  if (dataset.description) lines.push(dataset.description);
  lines.push(
    dataset.scorers.length === 0
      ? 'scorers: none for every case'
      : `scorers: ${dataset.scorers.map(scorerName).join(', ')}`,
  );
  lines.push('');
  const rows = [
    ['CASE', 'GOAL', 'RECORDED', 'SCORERS'],
    ...dataset.cases.map((c) => [
      c.id,
      startOf(c.goal, 50),
      c.recording ? `${c.recording.events.length} events` : '-',
      c.scorers?.map(scorerName).join(', ') || '-',
    ]),
  ];
  lines.push(...alignColumns(rows).map((line) => line.trimEnd()));
  return `${lines.join('\n')}\n`;
}

interface Removed {
  /** The names of the scorers removed, the dataset's and cases' own, each once. */
  scorers: string[];
  /** The ids of the cases removed. */
  cases: string[];
}

/**
 * The previous version's scorers and cases less those named to go: a scorer by its name, or by its type when it has
 * none (as `show` lists them), from the dataset's scorers and each case's own; a case by its id. A name that matches
 * nothing is refused, with the names there are.
 */
function without(
  name: string,
  previous: Dataset | undefined,
  scorerNames: ReadonlySet<string>,
  caseIds: ReadonlySet<string>,
): { scorers: ScorerSpec[]; cases: EvalCase[]; removed: Removed } {
  const scorers = previous?.scorers ?? [];
  const cases = previous?.cases ?? [];
  if (scorerNames.size === 0 && caseIds.size === 0)
    return { scorers, cases, removed: { scorers: [], cases: [] } };
  if (!previous) throw new CliError(`no dataset ${name} is stored, so there is nothing to remove from it`, 2);
  const version = `dataset ${name} version ${previous.version}`;
  const everyScorer = [...scorers, ...cases.flatMap((c) => c.scorers ?? [])].map(scorerName);
  for (const gone of scorerNames)
    if (!everyScorer.includes(gone))
      throw new CliError(
        `--remove-scorer: ${version} has no scorer ${gone}${suggestion(gone, everyScorer)}; ${
          everyScorer.length > 0
            ? `its scorers: ${[...new Set(everyScorer)].join(', ')}`
            : 'it has no scorers'
        }`,
        2,
      );
  const ids = cases.map((c) => c.id);
  for (const gone of caseIds)
    if (!ids.includes(gone))
      throw new CliError(`--remove-case: ${version} has no case ${gone}${suggestion(gone, ids)}`, 2);
  const keep = (spec: ScorerSpec) => !scorerNames.has(scorerName(spec));
  return {
    scorers: scorers.filter(keep),
    cases: cases
      .filter((c) => !caseIds.has(c.id))
      .map((c) => {
        if (!c.scorers || c.scorers.every(keep)) return c;
        const { scorers: own, ...rest } = c;
        const left = own.filter(keep);
        return left.length > 0 ? { ...rest, scorers: left } : rest;
      }),
    removed: { scorers: [...scorerNames], cases: [...caseIds] },
  };
}

/** Why a file of scorers alone added nothing: each of them is in the dataset already. */
function alreadyThere(files: readonly string[], scorers: number): string {
  const them = scorers === 1 ? 'its scorer is' : `its ${scorers} scorers are`;
  return files.length === 1
    ? `${files[0]} holds no case, and ${them} in the dataset already`
    : `the files hold no case, and their ${count(scorers, 'scorer')} ${scorers === 1 ? 'is' : 'are'} in the dataset already`;
}

/** How many tasks the --from-runs filters match, without the limit. */
async function tasksMatching(bus: JetStreamBus, select: RecordedSelect): Promise<number> {
  const store = await workflowStoreIfAny(bus);
  const records = store ? await readValues(store) : [];
  const { limit: _, ...unlimited } = select;
  return tasksToRecord(records, unlimited).length;
}

/** `1 case`, `2 cases`. */
function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** The previous version's scorers and each file's, each once. */
function mergeScorers(old: readonly ScorerSpec[], files: readonly DatasetFile[]): ScorerSpec[] {
  const seen = new Map(old.map((s) => [JSON.stringify(s), s]));
  for (const spec of files.flatMap((f) => f.scorers)) seen.set(JSON.stringify(spec), spec);
  return [...seen.values()];
}

async function readFile(path: string): Promise<DatasetFile> {
  try {
    // A file of scorers alone adds them to the cases from runs or from the previous version. Its scorers are made
    // now, as far as they can be with no pipeline, so a version that can never run them is not stored.
    return await readDatasetFile(path, { scorersOnly: true, checkScorers: true });
  } catch (error) {
    if (error instanceof DatasetFileError) throw new CliError(error.message, 2);
    throw error;
  }
}

/** Why --from-runs found no task: no task of the pipeline at all, or none that matched. */
async function noRunsFound(
  bus: JetStreamBus,
  options: DatasetAddOptions,
  status: EndedStatus | undefined,
): Promise<string> {
  const store = await workflowStoreIfAny(bus);
  const records = store ? await readValues(store) : [];
  const pipelines = [...new Set(records.map((r) => r.pipeline))].sort();
  const pipeline = options.pipeline ?? '';
  if (!pipelines.includes(pipeline)) {
    return `no task of pipeline ${pipeline} is known on this server${suggestion(pipeline, pipelines)}${
      pipelines.length > 0 ? `; tasks are of: ${pipelines.join(', ')}` : ''
    }`;
  }
  const since = options.since === undefined ? '' : ' in that time';
  return `no ${status ?? 'ended'} task of pipeline ${pipeline}${since}`;
}

/** Why a dataset could not be shown: the name or the version is unknown, with the names and versions there are. */
async function notStored(store: EvalStore, name: string, version: number | undefined): Promise<string> {
  const all = await store.datasets();
  const versions = all.filter((d) => d.name === name).map((d) => d.version);
  if (versions.length > 0)
    return `dataset ${name} has no version ${version}; its versions: ${versions.sort((a, b) => a - b).join(', ')}`;
  const names = [...new Set(all.map((d) => d.name))].sort();
  return `no dataset ${name} is stored${suggestion(name, names)}${names.length > 0 ? `; datasets: ${names.join(', ')}` : ''}`;
}

/** `name` or `name@version`. */
function datasetRef(ref: string): { name: string; version?: number } {
  const at = ref.lastIndexOf('@');
  if (at < 0) return { name: ref };
  const version = Number(ref.slice(at + 1));
  if (!Number.isInteger(version) || version < 1)
    throw new CliError(`"${ref}": a version after @ is a whole number from 1 (support@3)`, 2);
  return { name: ref.slice(0, at), version };
}

function idsOf(list: string): string[] {
  const ids = list
    .split(',')
    .map((id) => id.trim())
    .filter((id) => id !== '');
  if (ids.length === 0) throw new CliError('--tasks: give task ids, comma-separated', 2);
  return ids;
}

function statusNamed(value: string): EndedStatus {
  const status = STATUSES.find((s) => s === value.trim().toLowerCase());
  if (status) return status;
  throw new CliError(
    `--status: no ended status "${value}"${suggestion(value, STATUSES)}; statuses: ${STATUSES.join(', ')}`,
    2,
  );
}

function scorerName(spec: ScorerSpec): string {
  return spec.name ?? spec.type;
}

/** The start of a text on one line, cut with an ellipsis. */
function startOf(text: string, chars: number): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= chars ? line : `${line.slice(0, chars - 1)}…`;
}
