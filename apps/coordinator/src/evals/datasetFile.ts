import { readFile } from 'node:fs/promises';
import { basename, dirname, extname } from 'node:path';
import { EvalCase, formatPath, isName, ScorerSpec } from '@troupe/protocol';
import { LineCounter, parseDocument } from 'yaml';
import type { z } from 'zod';
import { suggestion } from '../config/didYouMean.ts';
import { positionOf } from '../config/yamlPosition.ts';
import { scorerProblems } from './scoreCase.ts';

/** A dataset as a file gives it: what `troupe eval dataset add --file` stores and `troupe eval run` runs. */
export interface DatasetFile {
  name: string;
  description?: string;
  scorers: ScorerSpec[];
  cases: EvalCase[];
}

/** The keys a YAML dataset file may have at its top, and a case (in either format). */
const FILE_KEYS = ['name', 'description', 'scorers', 'cases'] as const;
/** Keys of a stored version (`troupe eval dataset show --json`) that a file may carry and that are not read. */
const STORED_KEYS: readonly string[] = ['version', 'createdAt'];
const CASE_KEYS = Object.keys(EvalCase.shape);
const SCORER_TYPES = ScorerSpec.options.map((option) => option.shape.type.value);

/** A dataset file that cannot be read as one: the message names the file and each problem's line or case. */
export class DatasetFileError extends Error {
  override readonly name = 'DatasetFileError';
  readonly file: string;
  readonly problems: readonly string[];

  constructor(file: string, problems: readonly string[]) {
    super(
      problems.length === 1
        ? `${file}: ${problems[0]}`
        : `${file}: ${problems.length} problems:\n${problems.map((p) => `  ${p}`).join('\n')}`,
    );
    this.file = file;
    this.problems = problems;
  }
}

/** How a dataset file is read. */
export interface ReadDatasetOptions {
  /** A YAML file may hold scorers and no cases (`troupe eval dataset add` adds them to the cases there are). */
  scorersOnly?: boolean;
  /**
   * Each scorer (the file's and each case's) is made now, with no pipeline, as `makeScorers` makes it: a regex
   * compiles, a CEL expression parses, a JSON Schema compiles, a module's file exists (from the file's folder). One
   * that cannot be made is a problem of the file, naming the scorer and what is wrong. A judge's model is not checked
   * (that needs the pipeline).
   */
  checkScorers?: boolean;
}

/**
 * Reads a dataset file: YAML or JSON (`name`, `description`, `scorers`, `cases`; a stored version's `version` and
 * `createdAt`, as `troupe eval dataset show --json` prints it, are let be) or JSONL (one case a line; the dataset is
 * named after the file). A case without an `id` gets `case-<n>`, its place from 1. Throws a {@link DatasetFileError}
 * naming the file and, for each problem, its line and case and field: a case that does not parse, an unknown key or
 * scorer type, two cases with one id, a file with no cases, and with `checkScorers` a scorer that cannot be made.
 *
 * @example
 * const { name, scorers, cases } = await readDatasetFile('evals/support.yaml');
 */
export async function readDatasetFile(path: string, options: ReadDatasetOptions = {}): Promise<DatasetFile> {
  const text = await readFile(path, 'utf8').catch((error: NodeJS.ErrnoException) => {
    throw new DatasetFileError(path, [
      error.code === 'ENOENT' ? 'no such file' : `cannot read it: ${error.message}`,
    ]);
  });
  const ext = extname(path).toLowerCase();
  if (ext === '.jsonl') return parseJsonl(path, text, options);
  // JSON is YAML: a .json file is read as one.
  if (ext === '.yaml' || ext === '.yml' || ext === '.json') return parseYaml(path, text, options);
  throw new DatasetFileError(path, [
    `a dataset file is .yaml, .yml, .json or .jsonl, not "${ext || 'no extension'}"`,
  ]);
}

/**
 * Parses a JSONL dataset's text; `path` names the file in errors and, by its base name, the dataset (and with
 * `checkScorers`, by its folder, where a module scorer's path is read from).
 */
export function parseJsonl(
  path: string,
  text: string,
  options: Pick<ReadDatasetOptions, 'checkScorers'> = {},
): DatasetFile {
  const name = nameOfFile(path);
  const problems: string[] = [];
  const cases: { evalCase: EvalCase; where: string }[] = [];
  const lines = text.split('\n');
  let n = 0;
  for (const [index, line] of lines.entries()) {
    if (line.trim() === '') continue;
    n += 1;
    const where = `line ${index + 1}`;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (error) {
      problems.push(`${where}: not JSON (${(error as Error).message})`);
      continue;
    }
    const parsed = parseCase(raw, n);
    if ('problems' in parsed) problems.push(...parsed.problems.map((p) => `${where}: ${p.label}${p.text}`));
    else {
      cases.push({ evalCase: parsed.evalCase, where });
      if (options.checkScorers)
        problems.push(
          ...unmade(parsed.evalCase.scorers ?? [], dirname(path)).map(
            (p) => `${where}: case ${n} (id "${parsed.evalCase.id}"): ${p.text}`,
          ),
        );
    }
  }
  problems.push(...duplicates(cases));
  if (problems.length === 0 && cases.length === 0) problems.push('holds no cases');
  if (!isName(name)) problems.push(nameProblem(name, 'its file name'));
  if (problems.length > 0) throw new DatasetFileError(path, problems);
  return { name, scorers: [], cases: cases.map((c) => c.evalCase) };
}

/**
 * Parses a YAML (or JSON) dataset's text; `path` names the file in errors and the dataset when the file names none.
 * With `scorersOnly`, `cases` may be absent or empty.
 */
export function parseYaml(path: string, text: string, options: ReadDatasetOptions = {}): DatasetFile {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new DatasetFileError(
      path,
      doc.errors.map((e) => `line ${lines.linePos(e.pos[0]).line}: ${e.message.split('\n')[0] ?? e.message}`),
    );
  }
  const at = (where: readonly PropertyKey[]) => {
    const line = positionOf(doc, lines, where)?.line;
    return line === undefined ? '' : `line ${line}: `;
  };
  const raw: unknown = doc.toJS({ maxAliasCount: 1_000 });
  if (!isRecord(raw)) {
    throw new DatasetFileError(path, [
      'a YAML dataset is a mapping with name, description, scorers and cases (a list of cases)',
    ]);
  }
  const problems: string[] = [];
  for (const key of Object.keys(raw)) {
    if (!(FILE_KEYS as readonly string[]).includes(key) && !STORED_KEYS.includes(key))
      problems.push(
        `${at([key])}unknown key "${key}"${suggestion(key, FILE_KEYS)}; a dataset has ${FILE_KEYS.join(', ')}`,
      );
  }
  const name = raw.name === undefined ? nameOfFile(path) : raw.name;
  if (typeof name !== 'string' || !isName(name)) problems.push(`${at(['name'])}${nameProblem(name, 'name')}`);
  const description = raw.description;
  if (description !== undefined && typeof description !== 'string')
    problems.push(`${at(['description'])}description: must be text`);
  const scorers: ScorerSpec[] = [];
  if (raw.scorers !== undefined && !Array.isArray(raw.scorers)) {
    problems.push(`${at(['scorers'])}scorers: must be a list of scorers`);
  } else {
    for (const [index, spec] of ((raw.scorers ?? []) as unknown[]).entries()) {
      const parsed = ScorerSpec.safeParse(spec);
      if (parsed.success) scorers.push(parsed.data);
      else
        for (const issue of parsed.error.issues)
          problems.push(
            `${at(['scorers', index, ...issue.path])}${issueText(['scorers', index], issue, spec)}`,
          );
    }
  }
  const cases: { evalCase: EvalCase; where: string }[] = [];
  // With `scorersOnly`, a file of scorers alone, for cases from elsewhere.
  const scorersAlone = raw.cases === undefined && options.scorersOnly === true;
  if (!scorersAlone && !Array.isArray(raw.cases)) {
    problems.push(
      raw.cases === undefined
        ? 'cases: missing (a list of cases)'
        : `${at(['cases'])}cases: must be a list of cases`,
    );
  } else if (Array.isArray(raw.cases)) {
    for (const [index, item] of raw.cases.entries()) {
      const parsed = parseCase(item, index + 1);
      if ('problems' in parsed)
        problems.push(...parsed.problems.map((p) => `${at(['cases', index, ...p.path])}${p.label}${p.text}`));
      else cases.push({ evalCase: parsed.evalCase, where: at(['cases', index, 'id']).replace(/: $/, '') });
    }
    if (problems.length === 0 && cases.length === 0 && !options.scorersOnly)
      problems.push(`${at(['cases'])}holds no cases`);
  }
  problems.push(...duplicates(cases));
  if (options.checkScorers && problems.length === 0) {
    const baseDir = dirname(path);
    for (const p of unmade(scorers, baseDir)) problems.push(`${at(['scorers', p.index])}${p.text}`);
    for (const [index, { evalCase }] of cases.entries())
      for (const p of unmade(evalCase.scorers ?? [], baseDir))
        problems.push(
          `${at(['cases', index, 'scorers', p.index])}case ${index + 1} (id "${evalCase.id}"): ${p.text}`,
        );
  }
  if (problems.length > 0) throw new DatasetFileError(path, problems);
  return {
    name: name as string,
    ...(typeof description === 'string' ? { description } : {}),
    scorers,
    cases: cases.map((c) => c.evalCase),
  };
}

/**
 * The scorers of a list that `makeScorers` cannot make with no pipeline, each with its place and what is wrong:
 * `scorer 2 (regex "(["): not a regular expression: …`.
 */
function unmade(specs: readonly ScorerSpec[], baseDir: string): { index: number; text: string }[] {
  return scorerProblems(specs, { baseDir }).map(({ index, error }) => ({ index, text: error.message }));
}

interface CaseProblem {
  /** Where in the case, for the line. */
  path: readonly PropertyKey[];
  /** `case 3 (id "x"): ` */
  label: string;
  text: string;
}

/** A case as the file gives it, checked against {@link EvalCase}, with its id made from its place when it has none. */
function parseCase(raw: unknown, n: number): { evalCase: EvalCase } | { problems: CaseProblem[] } {
  if (!isRecord(raw))
    return { problems: [{ path: [], label: `case ${n}: `, text: 'must be an object (a case)' }] };
  const withId = raw.id === undefined ? { ...raw, id: `case-${n}` } : raw;
  const label = typeof withId.id === 'string' ? `case ${n} (id "${withId.id}"): ` : `case ${n}: `;
  const problems: CaseProblem[] = [];
  for (const key of Object.keys(raw)) {
    if (!CASE_KEYS.includes(key))
      problems.push({
        path: [key],
        label,
        text: `unknown field "${key}"${suggestion(key, CASE_KEYS)}; a case has ${CASE_KEYS.join(', ')}`,
      });
  }
  const parsed = EvalCase.safeParse(withId);
  if (!parsed.success)
    for (const issue of parsed.error.issues)
      problems.push({ path: issue.path, label, text: issueText([], issue, withId) });
  if (problems.length > 0 || !parsed.success) return { problems };
  return { evalCase: parsed.data };
}

/** An issue in plain words, its field first: `scorers[0].type: unknown scorer type "exactly" (did you mean …)`. */
function issueText(prefix: readonly PropertyKey[], issue: z.core.$ZodIssue, value: unknown): string {
  const field = formatPath([...prefix, ...issue.path]);
  const lead = field === '' ? '' : `${field}: `;
  const at = valueAt(value, issue.path);
  // A scorer whose `type` is not one of ours: zod says only that no option matched.
  if (issue.code === 'invalid_union' && issue.path.at(-1) === 'type') {
    if (at === undefined) return `${lead}missing: a scorer needs a type (${SCORER_TYPES.join(', ')})`;
    const type = String(at);
    return `${lead}unknown scorer type "${type}"${suggestion(type, SCORER_TYPES)}; types: ${SCORER_TYPES.join(', ')}`;
  }
  if (issue.code === 'invalid_type' && at === undefined)
    return `${lead}missing (required: ${issue.expected})`;
  return `${lead}${issue.message}`;
}

/** The value at a path in parsed input, undefined where the path leads nowhere. */
function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let at = value;
  for (const key of path) {
    if (Array.isArray(at) && typeof key === 'number') at = at[key];
    else if (isRecord(at) && typeof key === 'string') at = at[key];
    else return undefined;
  }
  return at;
}

/** Each id given to two cases or more, with the places that gave it. */
function duplicates(cases: readonly { evalCase: EvalCase; where: string }[]): string[] {
  const byId = new Map<string, string[]>();
  for (const { evalCase, where } of cases) byId.set(evalCase.id, [...(byId.get(evalCase.id) ?? []), where]);
  return [...byId]
    .filter(([, places]) => places.length > 1)
    .map(([id, places]) => {
      const known = places.filter((p) => p !== '');
      return `${places.length} cases have the id "${id}"${known.length ? ` (${known.join(', ')})` : ''}: ids must be unique`;
    });
}

const nameOfFile = (path: string) => basename(path, extname(path));

const nameProblem = (name: unknown, what: string) =>
  `name: "${String(name)}" (${what}) is not a dataset name: 1-63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit`;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
