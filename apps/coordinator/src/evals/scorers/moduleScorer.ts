import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ScorerSpec } from '@troupe/protocol';
import type { ScoreAnswer, ScorerModule } from '../evalTypes.ts';
import type { Check, CheckOptions, Finding } from './check.ts';

const TYPESCRIPT = /\.(ts|mts|cts)$/;

/**
 * A scorer of the user's own: a module (path from the eval file's folder) exporting `score` (`ScorerModule`), or a
 * default export that has one. The file must exist now; it is loaded when it first scores, once. What `score`
 * answers is a number from 0 to 1, a boolean, or `{ value, reason }`; anything else, or a throw, is an error score.
 */
export function moduleCheck(spec: Extract<ScorerSpec, { type: 'module' }>, options: CheckOptions): Check {
  const file = resolve(options.baseDir, spec.path);
  if (!isFile(file)) throw new Error(`${spec.path}: no such file (looked for ${file})`);
  let loaded: Promise<ScorerModule> | undefined;
  return async (run) => {
    loaded ??= scorerModule(spec.path, file);
    const module = await loaded;
    return answered(spec.path, await module.score(run, spec.options ?? {}));
  };
}

async function scorerModule(written: string, file: string): Promise<ScorerModule> {
  let namespace: Record<string, unknown>;
  try {
    namespace = await importScorer(file);
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

/**
 * Imports a scorer module. A TypeScript one loads where something already strips types (tsx registered by `troupe`,
 * or the test runner); else tsx's loaders are registered, once, and it is loaded again under another URL (Node keeps
 * a failed import's failure for its URL).
 */
async function importScorer(file: string): Promise<Record<string, unknown>> {
  const url = pathToFileURL(file).href;
  if (!TYPESCRIPT.test(file)) return import(url);
  try {
    return await import(url);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_UNKNOWN_FILE_EXTENSION') throw error;
  }
  await registerTsx();
  return import(`${url}?tsx`);
}

let tsx: Promise<void> | undefined;

/** tsx's ESM and CommonJS loaders both, as `troupe` registers them for tool modules (see its toolModuleImport.ts). */
function registerTsx(): Promise<void> {
  tsx ??= Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]).then(([esm, cjs]) => {
    esm.register();
    cjs.register();
  });
  return tsx;
}

function isFile(file: string): boolean {
  try {
    return statSync(file).isFile();
  } catch {
    return false;
  }
}
