import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ScorerSpec } from '@troupe/protocol';
import { type ImportModule, importWithNode } from '../../config/toolModules.ts';
import type { ScoreAnswer, ScorerModule } from '../evalTypes.ts';
import type { Check, CheckOptions, Finding } from './check.ts';

/**
 * A scorer of the user's own: a module (path from the eval file's folder) exporting `score` (`ScorerModule`), or a
 * default export that has one. The file must exist now; it is loaded when it first scores, once, by the importer
 * given (`troupe` passes the one that loads its pipelines' tool modules, TypeScript too; Node's `import()` else).
 * What `score` answers is a number from 0 to 1, a boolean, or `{ value, reason }`; anything else, or a throw, is an
 * error score.
 */
export function moduleCheck(spec: Extract<ScorerSpec, { type: 'module' }>, options: CheckOptions): Check {
  const file = resolve(options.baseDir, spec.path);
  if (!isFile(file))
    throw new Error(
      `${spec.path}: no such file (looked for ${file}, from ${options.baseDir}${options.online ? '' : `; ${WHERE}`})`,
    );
  let loaded: Promise<ScorerModule> | undefined;
  return async (run) => {
    loaded ??= scorerModule(spec.path, file, options.importModule ?? importWithNode);
    const module = await loaded;
    return answered(spec.path, await module.score(run, spec.options ?? {}));
  };
}

async function scorerModule(
  written: string,
  file: string,
  importModule: ImportModule,
): Promise<ScorerModule> {
  let namespace: Record<string, unknown>;
  try {
    namespace = await importModule(file);
  } catch (error) {
    throw new Error(`${written} could not be loaded: ${(error as Error).message}`, { cause: error });
  }
  const fallback = namespace.default as Partial<ScorerModule> | undefined;
  const score = namespace.score ?? fallback?.score;
  if (typeof score !== 'function') {
    throw new Error(`${written} exports no score function (export function score(run, options) { … })`);
  }
  return { score: score as ScorerModule['score'] };
}

function answered(written: string, answer: ScoreAnswer): Finding {
  const { value, reason } =
    typeof answer === 'object' && answer !== null ? answer : { value: answer, reason: undefined };
  const number = typeof value === 'boolean' ? (value ? 1 : 0) : value;
  if (typeof number !== 'number' || !(number >= 0 && number <= 1)) {
    throw new Error(
      `${written} answered ${JSON.stringify(answer)}; a score is a number from 0 to 1, a boolean, or { value, reason }`,
    );
  }
  return { value: number, reason: typeof reason === 'string' ? reason : `${written} gave ${number}` };
}

/** Where a module path is read from, as a missing file's error says. */
const WHERE =
  "a dataset file's module paths are read from its folder, a stored dataset's from the working directory: " +
  'run troupe eval run from the folder the dataset was made in, or give the module an absolute path';

function isFile(file: string): boolean {
  try {
    return statSync(file).isFile();
  } catch {
    return false;
  }
}
