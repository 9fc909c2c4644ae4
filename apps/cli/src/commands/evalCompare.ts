import { writeFile } from 'node:fs/promises';
import { compareExperiments } from '@troupe/client';
import { type Experiment, errorMessage } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { couldNotRun, experimentOf, LazyEvalStore } from '../experimentSource.ts';
import type { EvalFormat } from '../format/evalReport.ts';
import { comparisonNotes, renderComparison } from '../format/evalReportComparison.ts';
import { comparisonGate } from '../format/evalReportGate.ts';
import { CliError, type ServerOptions } from '../server.ts';

export interface EvalCompareOptions extends ServerOptions {
  format: EvalFormat;
  /** The most B's cost may rise over A's, in per cent. */
  maxCostIncrease?: number;
  /** Write the report here instead of to standard output. */
  out?: string;
}

/**
 * `troupe eval compare A B`: experiment B against A (each a stored id or a `--save`d JSON file), case by case, in the
 * format asked for. Exit 0 when the gate passes, 1 when B regressed (see {@link comparisonGate}), 2 when the
 * comparison could not be made — A and B with no case in common among them: a gate that compared nothing would pass.
 * Experiments of different datasets, or one compared with itself, are compared all the same, said on stderr and in
 * the report.
 */
export async function evalCompare(a: string, b: string, options: EvalCompareOptions): Promise<number> {
  exitWhenStdoutCloses();
  const stores = new LazyEvalStore(options, 'troupe-eval-compare');
  try {
    const [experimentA, experimentB] = [await experimentOf(a, stores), await experimentOf(b, stores)];
    const comparison = compareExperiments(experimentA, experimentB);
    if (comparison.summary.counts.common === 0)
      throw new CliError(
        `nothing to compare: A ${experimentA.id} (${datasetOf(experimentA)}) and B ${experimentB.id} (${datasetOf(experimentB)}) have no case in common${sameDataset(experimentA, experimentB) ? '' : ' (they ran different datasets)'}`,
        2,
      );
    for (const note of comparisonNotes(comparison)) process.stderr.write(`note: ${note}\n`);
    const gate = comparisonGate(
      comparison,
      options.maxCostIncrease === undefined ? {} : { maxCostIncreasePct: options.maxCostIncrease },
    );
    const report = renderComparison(comparison, gate, options.format);
    if (options.out !== undefined) {
      await writeFile(options.out, report).catch((error) => {
        throw new CliError(
          `compared ${a} with ${b} (${comparison.summary.verdict}, gate ${gate.length === 0 ? 'passed' : 'failed'}), but cannot write the report to ${options.out}: ${errorMessage(error)}`,
          2,
        );
      });
      process.stderr.write(
        `${comparison.summary.verdict}: ${comparison.summary.explanation} (gate ${gate.length === 0 ? 'passed' : 'failed'}; report in ${options.out})\n`,
      );
    } else process.stdout.write(report);
    return gate.length === 0 ? 0 : 1;
  } catch (error) {
    return couldNotRun(error, `cannot compare ${a} with ${b}`);
  } finally {
    await stores.close();
  }
}

const datasetOf = (e: Experiment) => `${e.dataset.name}@${e.dataset.version}`;
const sameDataset = (a: Experiment, b: Experiment) => datasetOf(a) === datasetOf(b);
