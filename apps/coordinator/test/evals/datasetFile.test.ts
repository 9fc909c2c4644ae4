import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatasetFileError, parseJsonl, parseYaml, readDatasetFile } from '../../src/evals/datasetFile.ts';

/** The message a parse throws, for the assertions on its words. */
function errorOf(parse: () => unknown): DatasetFileError {
  try {
    parse();
  } catch (error) {
    if (error instanceof DatasetFileError) return error;
    throw error;
  }
  throw new Error('parsed without an error');
}

describe('readDatasetFile', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-dataset-file-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads a YAML dataset: name, description, scorers and cases, with ids made for cases without one', async () => {
    const file = join(dir, 'support.yaml');
    await writeFile(
      file,
      `name: support-tickets
description: refunds and resets
scorers:
  - { type: contains, value: refund }
  - { type: cel, expr: 'usage.costUsd < 0.05', name: cheap }
cases:
  - id: refund
    goal: refund order 42
    input: { order: 42 }
    metadata: { tier: gold }
    expected: refunded
    scorers: [{ type: regex, pattern: "^refund", flags: i }]
  - goal: reset my password
`,
    );
    const dataset = await readDatasetFile(file);
    expect(dataset).toEqual({
      name: 'support-tickets',
      description: 'refunds and resets',
      scorers: [
        { type: 'contains', value: 'refund' },
        { type: 'cel', expr: 'usage.costUsd < 0.05', name: 'cheap' },
      ],
      cases: [
        {
          id: 'refund',
          goal: 'refund order 42',
          input: { order: 42 },
          metadata: { tier: 'gold' },
          expected: 'refunded',
          scorers: [{ type: 'regex', pattern: '^refund', flags: 'i' }],
        },
        { id: 'case-2', goal: 'reset my password' },
      ],
    });
  });

  it("reads a JSONL dataset, one case a line, named after the file; blank lines don't count", async () => {
    const file = join(dir, 'smoke-set.jsonl');
    await writeFile(
      file,
      `{"id":"a","goal":"say hi","expected":"hi"}\n\n{"goal":"say bye","scorers":[{"type":"exact","value":"bye"}]}\n`,
    );
    expect(await readDatasetFile(file)).toEqual({
      name: 'smoke-set',
      scorers: [],
      cases: [
        { id: 'a', goal: 'say hi', expected: 'hi' },
        { id: 'case-2', goal: 'say bye', scorers: [{ type: 'exact', value: 'bye' }] },
      ],
    });
  });

  it('reads a .json file as YAML, a stored version as `eval dataset show --json` prints it too', async () => {
    const file = join(dir, 'shown.json');
    const stored = {
      name: 'shown',
      description: 'from show --json',
      version: 3,
      createdAt: '2026-12-07T06:00:00.000Z',
      scorers: [{ type: 'contains', value: 'hi' }],
      cases: [{ id: 'a', goal: 'say hi', expected: 'hi' }],
    };
    await writeFile(file, JSON.stringify(stored));
    expect(await readDatasetFile(file)).toEqual({
      name: 'shown',
      description: 'from show --json',
      scorers: [{ type: 'contains', value: 'hi' }],
      cases: [{ id: 'a', goal: 'say hi', expected: 'hi' }],
    });
  });

  it('with checkScorers, refuses a scorer that cannot be made, naming its line, its place and what is wrong', async () => {
    await writeFile(join(dir, 'mine.ts'), 'export const score = () => 1;\n');
    const file = join(dir, 'scorers.yaml');
    const text = `scorers:
  - { type: regex, pattern: "([" }
  - { type: module, path: ./nope.ts }
  - { type: cel, expr: "output ==" }
  - { type: module, path: ./mine.ts }
  - { type: jsonSchema, schema: { type: 12 } }
cases:
  - { id: one, goal: g }
  - id: two
    goal: g
    scorers: [{ type: contains, value: ok }, { type: regex, pattern: "*x", name: starred }]
`;
    await writeFile(file, text);
    // Read as a file only, they are scorers like any other: eval run makes them with its pipeline.
    expect((await readDatasetFile(file)).scorers).toHaveLength(5);
    const error = await readDatasetFile(file, { checkScorers: true }).then(
      () => {
        throw new Error('read without an error');
      },
      (e: unknown) => e as DatasetFileError,
    );
    expect(error).toBeInstanceOf(DatasetFileError);
    expect(error.file).toBe(file);
    expect(error.problems).toEqual([
      expect.stringMatching(/^line 2: scorer 1 \(regex \/\(\[\/\): not a valid regular expression: /),
      `line 3: scorer 2 (module ./nope.ts): ./nope.ts: no such file (looked for ${join(dir, 'nope.ts')}, from ${dir}; a dataset file's module paths are read from its folder, a stored dataset's from the working directory: run troupe eval run from the folder the dataset was made in, or give the module an absolute path)`,
      expect.stringMatching(/^line 4: scorer 3 \(cel: output ==\): not a valid CEL expression: /),
      expect.stringMatching(/^line 6: scorer 5 \(jsonSchema\): not a usable JSON Schema: /),
      expect.stringMatching(
        /^line 11: case 2 \(id "two"\): scorer 2 \(starred\): not a valid regular expression: /,
      ),
    ]);
    // A JSONL case's own scorers, by line.
    const jsonl = join(dir, 'checked.jsonl');
    await writeFile(
      jsonl,
      '{"goal":"g"}\n{"goal":"h","scorers":[{"type":"module","path":"./mine.ts"},{"type":"module","path":"gone.ts"}]}\n',
    );
    await expect(readDatasetFile(jsonl, { checkScorers: true })).rejects.toThrow(
      /^.*checked\.jsonl: line 2: case 2 \(id "case-2"\): scorer 2 \(module gone\.ts\): gone\.ts: no such file/,
    );
  });

  it('names the file when it is missing or of another kind', async () => {
    await expect(readDatasetFile(join(dir, 'absent.yaml'))).rejects.toThrow(/absent\.yaml: no such file/);
    const csv = join(dir, 'cases.csv');
    await writeFile(csv, 'goal\nhi\n');
    await expect(readDatasetFile(csv)).rejects.toThrow(
      /cases\.csv: a dataset file is \.yaml, \.yml, \.json or \.jsonl/,
    );
  });
});

describe('a JSONL dataset that cannot be read', () => {
  it('names the line and the case of each problem, and reads on past them', () => {
    const error = errorOf(() =>
      parseJsonl(
        'evals/runs.jsonl',
        [
          '{"id":"ok","goal":"fine"}',
          '{"id":"x", "goal": ',
          '{"id":"y"}',
          '{"id":"z","goal":"g","scorers":[{"type":"exactly","value":"v"}]}',
          '{"id":"w","goal":"g","expectd":"v"}',
          '[1,2]',
        ].join('\n'),
      ),
    );
    expect(error.file).toBe('evals/runs.jsonl');
    expect(error.problems).toEqual([
      expect.stringMatching(/^line 2: not JSON \(/),
      'line 3: case 3 (id "y"): goal: missing (required: string)',
      expect.stringMatching(
        /^line 4: case 4 \(id "z"\): scorers\[0\]\.type: unknown scorer type "exactly" \(did you mean "exact"\?\); types: exact, contains, regex/,
      ),
      expect.stringMatching(
        /^line 5: case 5 \(id "w"\): unknown field "expectd" \(did you mean "expected"\?\)/,
      ),
      'line 6: case 6: must be an object (a case)',
    ]);
    expect(error.message).toMatch(/^evals\/runs\.jsonl: 5 problems:\n {2}line 2: not JSON/);
  });

  it('refuses two cases with one id, naming both lines', () => {
    const error = errorOf(() =>
      parseJsonl('d.jsonl', '{"id":"a","goal":"1"}\n{"id":"b","goal":"2"}\n{"id":"a","goal":"3"}'),
    );
    expect(error.message).toBe('d.jsonl: 2 cases have the id "a" (line 1, line 3): ids must be unique');
  });

  it('refuses a file with no cases', () => {
    expect(errorOf(() => parseJsonl('empty.jsonl', '\n\n')).message).toBe('empty.jsonl: holds no cases');
  });

  it('refuses a file name that is not a dataset name', () => {
    expect(errorOf(() => parseJsonl('My Runs.jsonl', '{"goal":"g"}')).message).toMatch(
      /^My Runs\.jsonl: name: "My Runs" \(its file name\) is not a dataset name/,
    );
  });
});

describe('a YAML dataset that cannot be read', () => {
  it('names the line, the case and the field of each problem', () => {
    const error = errorOf(() =>
      parseYaml(
        'support.yaml',
        `name: support
scorers:
  - { type: regex }
  - { value: x }
cases:
  - id: one
    goal: first
  - id: two
    scorers:
      - type: judge
        rubric: polite
        model: Not A Name
  - goal: third
    metadata: { tier: 3 }
`,
      ),
    );
    expect(error.problems).toEqual([
      'line 3: scorers[0].pattern: missing (required: string)',
      expect.stringMatching(/^line 4: scorers\[1\]\.type: missing: a scorer needs a type \(exact, contains/),
      'line 8: case 2 (id "two"): goal: missing (required: string)',
      expect.stringMatching(/^line 12: case 2 \(id "two"\): scorers\[0\]\.model: must be 1-63 characters/),
      expect.stringMatching(
        /^line 14: case 3 \(id "case-3"\): metadata\.tier: Invalid input: expected string/,
      ),
    ]);
  });

  it('names an unknown top-level key, a bad YAML line, two cases with one id and no cases at all', () => {
    expect(errorOf(() => parseYaml('a.yaml', 'name: a\ncase:\n  - goal: g\n')).problems).toEqual([
      'line 2: unknown key "case" (did you mean "cases"?); a dataset has name, description, scorers, cases',
      'cases: missing (a list of cases)',
    ]);
    expect(errorOf(() => parseYaml('b.yaml', 'name: b\ncases: [ { goal: g }\n')).message).toMatch(
      /^b\.yaml: line \d+: /,
    );
    expect(
      errorOf(() =>
        parseYaml(
          'c.yaml',
          'cases:\n  - { id: x, goal: g }\n  - { id: y, goal: g }\n  - { id: x, goal: h }\n',
        ),
      ).message,
    ).toBe('c.yaml: 2 cases have the id "x" (line 2, line 4): ids must be unique');
    expect(errorOf(() => parseYaml('d.yaml', 'name: d\ncases: []\n')).message).toBe(
      'd.yaml: line 2: holds no cases',
    );
    expect(errorOf(() => parseYaml('e.yaml', '- goal: g\n')).message).toMatch(
      /^e\.yaml: a YAML dataset is a mapping/,
    );
  });

  it('holds scorers alone only when asked to', () => {
    const text = 'scorers: [{ type: exact, value: ok }]\n';
    expect(parseYaml('s.yaml', text, { scorersOnly: true })).toEqual({
      name: 's',
      scorers: [{ type: 'exact', value: 'ok' }],
      cases: [],
    });
    expect(errorOf(() => parseYaml('s.yaml', text)).message).toBe('s.yaml: cases: missing (a list of cases)');
  });

  it('takes its name from the file when it names none', () => {
    expect(parseYaml('dir/nightly.yml', 'cases: [ { goal: g } ]').name).toBe('nightly');
  });
});
