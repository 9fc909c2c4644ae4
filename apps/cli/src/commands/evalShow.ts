import { buildTaskTrace } from '@troupe/client';
import type { CaseResult, Experiment, TroupeEvent } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { taskHistory } from '../eventFeed.ts';
import { couldNotRun, experimentOf, isExperimentFile, LazyEvalStore } from '../experimentSource.ts';
import { formatDuration } from '../format/duration.ts';
import { type EvalFormat, renderExperiment, scoreLine, shortHash } from '../format/evalReport.ts';
import { formatTrace } from '../format/formatTrace.ts';
import { formatCost } from '../format/runsTable.ts';
import { alignColumns } from '../format/table.ts';
import { CliError, type ServerOptions } from '../server.ts';

export interface EvalListOptions extends ServerOptions {
  json: boolean;
}

/** `troupe eval list`: the stored experiments, newest first (`--json`: a summary a line). */
export async function evalList(options: EvalListOptions): Promise<number> {
  exitWhenStdoutCloses();
  const stores = new LazyEvalStore(options, 'troupe-eval-list');
  try {
    const experiments = await (await stores.store()).experiments();
    if (options.json) {
      for (const e of experiments) process.stdout.write(`${JSON.stringify(e)}\n`);
      return 0;
    }
    if (experiments.length === 0) {
      process.stdout.write(
        'no experiment is stored yet: troupe eval run <dataset> --pipeline <file> makes one\n',
      );
      return 0;
    }
    const rows = experiments.map((e) => [
      e.id,
      `${e.dataset.name}@${e.dataset.version}`,
      `${e.pipeline.name} ${shortHash(e.pipeline.hash)}`,
      e.mode,
      `${e.totals.passed}/${e.totals.cases}`,
      e.totals.meanScore.toFixed(2),
      formatCost(e.totals.costUsd),
      formatDuration(e.totals.p50Ms),
      e.startedAt,
    ]);
    const header = ['EXPERIMENT', 'DATASET', 'PIPELINE', 'MODE', 'PASSED', 'SCORE', 'COST', 'P50', 'STARTED'];
    for (const line of alignColumns([header, ...rows], { right: [4, 5, 6, 7] }))
      process.stdout.write(`${line}\n`);
    return 0;
  } catch (error) {
    return couldNotRun(error, 'cannot list the experiments');
  } finally {
    await stores.close();
  }
}

export interface EvalShowOptions extends ServerOptions {
  format: EvalFormat;
}

/**
 * `troupe eval show <experiment> [<case>]`: an experiment in the format asked for; with a case, its scores with their
 * reasons and its run as `troupe trace` draws one (from the events the experiment kept, or else the server's).
 */
export async function evalShow(
  experimentArg: string,
  caseId: string | undefined,
  options: EvalShowOptions,
): Promise<number> {
  exitWhenStdoutCloses();
  const stores = new LazyEvalStore(options, 'troupe-eval-show');
  try {
    const experiment = await experimentOf(experimentArg, stores);
    if (caseId === undefined) {
      process.stdout.write(renderExperiment(experiment, options.format));
      return 0;
    }
    const result = experiment.cases.find((c) => c.caseId === caseId);
    if (!result)
      throw new CliError(
        `experiment ${experiment.id} has no case ${caseId} (its cases: ${experiment.cases
          .slice(0, 10)
          .map((c) => c.caseId)
          .join(', ')}${experiment.cases.length > 10 ? ', …' : ''})`,
        2,
      );
    if (options.format === 'json') {
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      return 0;
    }
    const events = result.events ?? (await serverEvents(result, experimentArg, stores));
    process.stdout.write(`${caseLines(experiment, result, events).join('\n')}\n`);
    return 0;
  } catch (error) {
    return couldNotRun(error, `cannot show ${experimentArg}`);
  } finally {
    await stores.close();
  }
}

/** A live case's events, which the experiment does not keep: from the server's stream, while it keeps them. */
async function serverEvents(
  result: CaseResult,
  experimentArg: string,
  stores: LazyEvalStore,
): Promise<TroupeEvent[] | undefined> {
  // An experiment read from a file is looked at offline: no server is asked.
  if (result.taskId === undefined || isExperimentFile(experimentArg)) return undefined;
  const events = await taskHistory(await stores.bus(), result.taskId);
  return events.length > 0 ? events : undefined;
}

/** A case: how it went, each score with its reason, and its run as a trace tree. */
export function caseLines(
  experiment: Experiment,
  result: CaseResult,
  events: readonly TroupeEvent[] | undefined,
): string[] {
  const lines = [
    `case ${result.caseId} of experiment ${experiment.id}: ${result.status}` +
      (result.taskStatus ? ` (task ${result.taskStatus})` : '') +
      ` · ${formatCost(result.usage.costUsd)} · ${formatDuration(result.durationMs)}`,
  ];
  if (result.error !== undefined) lines.push(`error: ${result.error}`);
  if (result.scores.length > 0) {
    lines.push('scores:');
    for (const s of result.scores) lines.push(`  ${s.pass ? 'pass' : 'FAIL'}  ${scoreLine(s)}`);
  }
  if (result.tools.length > 0) lines.push(`tools: ${result.tools.join(' → ')}`);
  if (result.output !== undefined) lines.push('output:', ...result.output.split('\n').map((l) => `  ${l}`));
  if (events && events.length > 0 && result.taskId !== undefined) {
    lines.push(
      '',
      formatTrace(buildTaskTrace(result.taskId, [...events]), { color: process.stdout.isTTY === true }),
    );
  } else if (result.taskId !== undefined) {
    lines.push(
      '',
      `(no events of task ${result.taskId} are kept: troupe trace ${result.taskId} on its server)`,
    );
  }
  return lines;
}
