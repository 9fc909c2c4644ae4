import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools, caseRunOf, loadPipeline, makeScorers, scoreRun } from '@troupe/coordinator';
import type { Dataset, EvalComparison, EventOf, Experiment, Score } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath, fixturePath } from './support/harness.ts';

/**
 * Issue 34 end to end, through the CLI as docs/evals.md walks through it: runs of examples/evals/notes.yaml recorded
 * on a real server become a dataset; replaying it gives the scores the recorded runs get; the deliberately worse
 * notes.worse.yaml, run on its own (scripted) models against the recorded tool results, fails its thresholds and
 * `troupe eval compare` lists the regressions, both exiting 1 as a CI gate needs; model mode never runs a tool that
 * has an effect (test/fixtures/evals/sender.yaml's send_note, which keeps a ledger); the example's hand-written
 * dataset runs with no server; and the dataset, exported to a file, gates a CI job with no server, in JUnit XML that
 * is well-formed.
 */
describe('evals: from recorded runs to a CI gate', () => {
  let nats: TestNats;
  let home: string;
  let dir: string;
  let up: CliProcess;
  // The walk-through's commands run in the example's folder, where the scorers' module path starts.
  const evalsDir = examplePath('evals');
  const notes = examplePath('evals/notes.yaml');
  const worse = examplePath('evals/notes.worse.yaml');
  const sender = fixturePath('evals/sender.yaml');
  /** Where sender.yaml's send_note writes a line each time it runs for real. */
  let ledger: string;
  const sent = async () => (await readFile(ledger, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  const goals = [
    'Write the release note for v2.3, which makes exports twice as fast.',
    'Write the release note for v2.3.1, which fixes the login timeout.',
    'Write one release note covering the faster exports and the login fix.',
  ];
  const taskIds = ['eval-exports', 'eval-login', 'eval-both'];
  const cli = (args: string[]) => troupe([...args, '--server', nats.url], cliEnv(), 120_000, evalsDir);
  let dataset: Dataset;

  /** `troupe eval run` of the stored dataset, reported as JSON and saved to `<name>.json` for a compare by file. */
  const evalRun = async (name: string, pipeline: string, mode: 'replay' | 'model') => {
    const saved = join(dir, `${name}.json`);
    const result = await cli([
      ...['eval', 'run', 'notes-runs', '--pipeline', pipeline, '--mode', mode],
      ...['--name', name, '--format', 'json', '--save', saved],
    ]);
    const experiment = JSON.parse(result.stdout) as Experiment;
    expect(JSON.parse(await readFile(saved, 'utf8'))).toEqual(experiment);
    return { code: result.code, stderr: result.stderr, experiment, saved };
  };
  /** Each case's scores as a person reads them: by scorer, its value, whether it passed and why. */
  const scoresOf = (cases: readonly { caseId: string; scores: readonly Score[] }[]) =>
    Object.fromEntries(
      cases.map((c) => [
        c.caseId,
        c.scores.map(({ scorer, value, pass, reason }) => ({ scorer, value, pass, reason })),
      ]),
    );

  beforeAll(async () => {
    nats = await startTestNats();
    home = await mkdtemp(join(tmpdir(), 'troupe-evals-home-'));
    dir = await mkdtemp(join(tmpdir(), 'troupe-evals-'));
    ledger = join(dir, 'sent.jsonl');
    up = startTroupe(
      ['up', notes, sender, '--home', home],
      cliEnv({ NATS_URL: nats.url, SEND_NOTE_LEDGER: ledger }),
    );
    await up.waitFor(/troupe is up on/);
    for (const [i, goal] of goals.entries()) {
      const submitted = await cli(['submit', 'notes', goal, '--id', taskIds[i] as string, '--wait']);
      expect(submitted.code, submitted.stderr).toBe(0);
      expect(submitted.stdout).toContain('task.completed');
    }
  });
  afterAll(async () => {
    await up?.stop();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
    await rm(dir, { recursive: true, force: true });
  });

  let base: Experiment;
  let baseFile: string;

  it('turns the recorded runs into a dataset that replays with the scores the recorded runs get', async () => {
    const added = await cli([
      ...['eval', 'dataset', 'add', 'notes-runs', '--from-runs', '--pipeline', 'notes'],
      ...['--status', 'completed', '--since', '1h', '--file', 'notes.scorers.yaml'],
    ]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toContain('stored dataset notes-runs version 1: 3 cases (3 recorded)');
    const shown = await cli(['eval', 'dataset', 'show', 'notes-runs', '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    dataset = JSON.parse(shown.stdout) as Dataset;
    expect(dataset.version).toBe(1);
    expect(dataset.scorers).toHaveLength(7);
    expect(dataset.cases.map((c) => c.id).sort()).toEqual([...taskIds].sort());
    for (const c of dataset.cases) {
      expect(c.goal).toBe(goals[taskIds.indexOf(c.id)]);
      expect(c.recording?.events.map((e) => e.kind)).toContain('task.completed');
      expect(c.expected).toBe('Wrote notes/release.md with a title and a paragraph on what changed.');
    }

    const first = await evalRun('base', notes, 'replay');
    expect(first.code, first.stderr).toBe(0);
    base = first.experiment;
    baseFile = first.saved;
    expect(base).toMatchObject({ mode: 'replay', dataset: { name: 'notes-runs', version: 1 } });
    expect(base.totals).toMatchObject({
      cases: 3,
      passed: 3,
      failed: 0,
      errored: 0,
      skipped: 0,
      meanScore: 1,
    });
    for (const c of base.cases) {
      const recorded = dataset.cases.find((d) => d.id === c.caseId);
      const final = recorded?.recording?.events.find(
        (e): e is EventOf<'task.completed'> => e.kind === 'task.completed',
      );
      // The recorded run again: its output, tools, steps and usage (the cost of the recorded replies).
      expect(c.output).toBe(recorded?.expected);
      expect(c.tools).toEqual(['write_file', 'read_file']);
      expect(c.steps).toEqual(['write', 'review']);
      expect(c.usage.costUsd).toBeGreaterThan(0);
      expect(c.usage).toEqual(final?.data.usage);
    }

    // The recorded runs themselves, scored with the same scorers: the replay's scores are theirs, reasons included.
    const pipeline = await loadPipeline(notes, { toolNames: builtinTools().names() });
    const scorers = makeScorers(dataset.scorers, { baseDir: evalsDir, pipeline });
    const recordedScores = await Promise.all(
      dataset.cases.map(async (c) => ({
        caseId: c.id,
        scores: await scoreRun(caseRunOf(c, c.recording?.events ?? []), scorers, {
          pipeline,
          baseDir: evalsDir,
        }),
      })),
    );
    expect(scoresOf(base.cases)).toEqual(scoresOf(recordedScores));
    expect(base.cases.flatMap((c) => c.scores).filter((score) => !score.pass)).toEqual([]);

    // Replayed again, and on the models of the same file (tools answered from the recording): the same scores.
    const again = await evalRun('base-again', notes, 'replay');
    expect(again.code, again.stderr).toBe(0);
    expect(scoresOf(again.experiment.cases)).toEqual(scoresOf(base.cases));
    const model = await evalRun('base-model', notes, 'model');
    expect(model.code, model.stderr).toBe(0);
    expect(scoresOf(model.experiment.cases)).toEqual(scoresOf(base.cases));

    const same = await cli(['eval', 'compare', 'base', 'base-again', '--format', 'json']);
    expect(same.code, same.stderr).toBe(0);
    const comparison = JSON.parse(same.stdout) as EvalComparison;
    expect(comparison.cases.map((c) => c.change)).toEqual(['unchanged', 'unchanged', 'unchanged']);
    expect(comparison.summary.counts).toMatchObject({ common: 3, regressed: 0, passesLost: 0 });
    expect(comparison.summary.verdict).not.toBe('worse');
  });

  it('catches the worsened pipeline: its run fails the thresholds and compare lists every regression', async () => {
    const run = await evalRun('worse', worse, 'model');
    // Exit 1: cases failed their thresholds, so a CI job stops here.
    expect(run.code, run.stderr).toBe(1);
    expect(run.experiment.totals).toMatchObject({ cases: 3, passed: 0, failed: 3, errored: 0 });
    for (const c of run.experiment.cases) {
      expect(c.tools).toEqual([]);
      expect(c.output).toBe('Exports are faster now.');
      const failing = c.scores.filter((s) => !s.pass).map((s) => s.scorer);
      expect(failing).toEqual([
        'contains "notes/release.md"',
        'wrote the note',
        'written then read',
        'release note',
      ]);
    }
    // Cheaper, as it does less: the cost is the models' own, not the recording's.
    expect(run.experiment.totals.costUsd).toBeGreaterThan(0);
    expect(run.experiment.totals.costUsd).toBeLessThan(base.totals.costUsd);

    const compared = await cli(['eval', 'compare', 'base', 'worse', '--format', 'json']);
    expect(compared.code, compared.stderr).toBe(1);
    const comparison = JSON.parse(compared.stdout) as EvalComparison;
    expect(comparison.summary.verdict).toBe('worse');
    expect(comparison.summary.counts).toMatchObject({ common: 3, regressed: 3, passesLost: 3 });
    expect(comparison.summary.passRate).toMatchObject({ a: 1, b: 0 });
    for (const c of comparison.cases) {
      expect(c.change).toBe('regressed');
      expect(c.scorers.find((s) => s.scorer === 'wrote the note')).toMatchObject({
        a: { pass: true },
        b: { pass: false },
      });
    }
    // The table a person reads names each regressed case; the saved files compare as the stored ones do.
    const table = await troupe(['eval', 'compare', baseFile, run.saved], cliEnv(), 30_000, dir);
    expect(table.code, table.stderr).toBe(1);
    for (const id of taskIds) expect(table.stdout).toMatch(new RegExp(`^${id} +regressed`, 'm'));
    expect(table.stdout).toContain('verdict: worse');
  });

  it('catches each half of the worsened pipeline on its own: a reviewer that approves unread, a writer that skips the file', async () => {
    // Only the reviewer made worse: the writer still writes the note, so only the tools' order shows it.
    const lazyReviewer = await evalRun(
      'lazy-reviewer',
      fixturePath('evals/notes.lazy-reviewer.yaml'),
      'model',
    );
    expect(lazyReviewer.code, lazyReviewer.stderr).toBe(1);
    expect(lazyReviewer.experiment.totals).toMatchObject({ cases: 3, passed: 0, failed: 3, errored: 0 });
    for (const c of lazyReviewer.experiment.cases) {
      expect(c.tools).toEqual(['write_file']);
      expect(c.scores.filter((s) => !s.pass).map((s) => s.scorer)).toEqual(['written then read']);
    }
    // Only the writer made worse: the reviewer still reads (the recorded read answers), and approves.
    const lazyWriter = await evalRun('lazy-writer', fixturePath('evals/notes.lazy-writer.yaml'), 'model');
    expect(lazyWriter.code, lazyWriter.stderr).toBe(1);
    expect(lazyWriter.experiment.totals).toMatchObject({ cases: 3, passed: 0, failed: 3, errored: 0 });
    for (const c of lazyWriter.experiment.cases) {
      expect(c.tools).toEqual(['read_file']);
      expect(c.scores.filter((s) => !s.pass).map((s) => s.scorer)).toEqual([
        'contains "notes/release.md"',
        'wrote the note',
        'written then read',
        'release note',
      ]);
    }

    for (const b of ['lazy-reviewer', 'lazy-writer']) {
      const compared = await cli(['eval', 'compare', 'base', b, '--format', 'json']);
      expect(compared.code, `${b}: ${compared.stderr}`).toBe(1);
      const comparison = JSON.parse(compared.stdout) as EvalComparison;
      expect(comparison.summary.verdict).toBe('worse');
      expect(comparison.summary.counts).toMatchObject({ common: 3, regressed: 3, passesLost: 3 });
      for (const c of comparison.cases) {
        expect(c.change).toBe('regressed');
        expect(c.scorers.find((s) => s.scorer === 'written then read')).toMatchObject({
          a: { pass: true },
          b: { pass: false },
        });
      }
    }
  });

  it('never runs a tool with an effect in model mode: the recorded call answers, a new one is refused', async () => {
    const submitted = await cli(['submit', 'sender', 'Announce v2.3', '--id', 'eval-send', '--wait']);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(await sent()).toHaveLength(1);
    const added = await cli([
      'eval',
      'dataset',
      'add',
      'sender-runs',
      '--tasks',
      'eval-send',
      '--pipeline',
      'sender',
    ]);
    expect(added.code, added.stderr).toBe(0);

    // The changed prompt repeats the recorded call (its arguments in another order), makes a new one and writes a
    // copy; the tool's environment is the one that ran it for real when recorded.
    const run = await troupe(
      [
        ...[
          'eval',
          'run',
          'sender-runs',
          '--pipeline',
          fixturePath('evals/sender.changed.yaml'),
          '--mode',
          'model',
        ],
        ...['--format', 'json', '--server', nats.url],
      ],
      cliEnv({ SEND_NOTE_LEDGER: ledger }),
      120_000,
      evalsDir,
    );
    expect(run.code, run.stderr).toBe(0);
    const [result] = (JSON.parse(run.stdout) as Experiment).cases;
    expect(result?.output).toBe('Sent the release note to ops and to all; a copy is in sent.md.');
    const results = (result?.events ?? []).flatMap((e) => (e.kind === 'tool.result' ? [e.data] : []));
    expect(results.map(({ tool, ok, output }) => ({ tool, ok, output }))).toEqual([
      { tool: 'send_note', ok: true, output: 'sent to ops' },
      { tool: 'send_note', ok: false, output: expect.any(String) },
      { tool: 'write_file', ok: true, output: expect.stringContaining('sent.md') },
    ]);
    expect(results[1]?.error?.message).toContain(
      'send_note was not run: the call is not in the recording, and model mode runs for real only read-only tools',
    );
    // Nothing was sent again: the ledger holds the recorded run's one line.
    expect(await sent()).toHaveLength(1);
  });

  it("runs the example's hand-written dataset with no server, on the models (tools for real) or live", async () => {
    // Its cases have no recording: model mode calls the models and runs write_file for real; live runs real tasks.
    const run = async (pipeline: string, mode: 'model' | 'live' = 'model') => {
      const args = ['eval', 'run', 'notes.dataset.yaml', '--pipeline', pipeline, '--mode', mode];
      const result = await troupe([...args, '--no-store', '--format', 'json'], cliEnv(), 120_000, evalsDir);
      return {
        code: result.code,
        stderr: result.stderr,
        experiment: JSON.parse(result.stdout) as Experiment,
      };
    };
    const refused = await troupe(
      ['eval', 'run', 'notes.dataset.yaml', '--pipeline', notes, '--no-store'],
      cliEnv(),
      60_000,
      evalsDir,
    );
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('have no recording to replay');

    const good = await run(notes);
    expect(good.code, good.stderr).toBe(0);
    expect(good.experiment.totals).toMatchObject({ cases: 3, passed: 3, meanScore: 1 });
    // The case's own regex scorer, beside the dataset's seven.
    expect(good.experiment.cases.map((c) => c.scores.length)).toEqual([7, 7, 8]);
    const bad = await run(worse);
    expect(bad.code, bad.stderr).toBe(1);
    expect(bad.experiment.totals).toMatchObject({ cases: 3, passed: 0, failed: 3 });
    const live = await run(notes, 'live');
    expect(live.code, live.stderr).toBe(0);
    expect(live.experiment).toMatchObject({ mode: 'live', totals: { cases: 3, passed: 3, meanScore: 1 } });
  });

  it('gates a CI job on the dataset exported to a file, with no server, in well-formed JUnit XML', async () => {
    // The reader below refuses what is not well-formed, so the checks on the reports can fail.
    for (const bad of [
      '<a><b></a>',
      '<a x="1" x="2"/>',
      '<a>1 < 2</a>',
      '<a>&nbsp;</a>',
      '<a/><b/>',
      '<a>',
    ]) {
      expect(() => parseXml(bad), bad).toThrow(/not well-formed/);
    }
    // `troupe eval dataset show --json` without the version's own keys, as docs/evals.md's `jq 'del(.version,
    // .createdAt)'` keeps it (JSON is YAML); the module path is made absolute, as the file is not beside the scorer.
    const file = join(dir, 'notes-runs.yaml');
    const { version: _version, createdAt: _createdAt, ...content } = dataset;
    const scorers = content.scorers.map((s) =>
      s.type === 'module' ? { ...s, path: join(evalsDir, s.path) } : s,
    );
    await writeFile(file, JSON.stringify({ ...content, scorers }));
    // No server is named and none is reached: NATS_URL is not set for the CLI.
    const offline = (args: string[]) => troupe(args, cliEnv(), 120_000, dir);

    const out = join(dir, 'worse.junit.xml');
    const failing = await offline([
      ...['eval', 'run', file, '--pipeline', worse, '--mode', 'model', '--no-store'],
      ...['--format', 'junit', '--out', out],
    ]);
    expect(failing.code, failing.stderr).toBe(1);
    expect(failing.stderr).toContain(`0 of 3 cases passed; report in ${out}`);
    const report = parseXml(await readFile(out, 'utf8'));
    expect(report).toMatchObject({
      name: 'testsuites',
      attributes: { tests: '3', failures: '3', errors: '0' },
    });
    const testcases = descendants(report).filter((e) => e.name === 'testcase');
    expect(testcases.map((c) => c.attributes.name).sort()).toEqual([...taskIds].sort());
    for (const testcase of testcases) {
      const failures = testcase.children.filter((f) => f.name === 'failure');
      expect(failures.map((f) => f.attributes.message?.split(':')[0])).toEqual([
        'contains "notes/release.md"',
        'wrote the note',
        'written then read',
        'release note',
      ]);
      expect(failures[1]?.text).toContain('tools.called("write_file") >= 1 is false');
    }

    // The pipeline as it was passes the same gate: every case recorded, so it replays without --mode.
    const passing = await offline([
      'eval',
      'run',
      file,
      '--pipeline',
      notes,
      '--no-store',
      '--format',
      'junit',
    ]);
    expect(passing.code, passing.stderr).toBe(0);
    const clean = descendants(parseXml(passing.stdout));
    expect(clean.filter((e) => e.name === 'testcase')).toHaveLength(3);
    expect(clean.filter((e) => e.name === 'failure' || e.name === 'error')).toEqual([]);

    // compare's JUnit: a failure per regression.
    const compared = await offline([
      'eval',
      'compare',
      baseFile,
      join(dir, 'worse.json'),
      '--format',
      'junit',
    ]);
    expect(compared.code, compared.stderr).toBe(1);
    const regressions = descendants(parseXml(compared.stdout)).filter((e) => e.name === 'testcase');
    for (const id of taskIds) {
      expect(regressions.find((c) => c.attributes.name === id)?.children.map((f) => f.name)).toContain(
        'failure',
      );
    }
  });
});

const descendants = (e: XmlElement): XmlElement[] => [e, ...e.children.flatMap(descendants)];

interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

/**
 * A strict reader of the XML subset JUnit reports use (declaration, elements, attributes, text, CDATA, comments and
 * the five predefined entities plus character references): it throws on anything not well-formed — an unclosed or
 * mismatched tag, an unquoted or repeated attribute, a raw `<` or `&` in text or attributes, a second root.
 */
function parseXml(source: string): XmlElement {
  let at = 0;
  const fail = (why: string): never => {
    throw new Error(`not well-formed XML at ${at}: ${why}: ${JSON.stringify(source.slice(at, at + 40))}`);
  };
  const decode = (raw: string) => {
    if (/<|&(?!(lt|gt|amp|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)/.test(raw)) fail(`a raw < or & in ${raw}`);
    return raw.replace(/&(lt|gt|amp|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);/g, (_, entity: string) => {
      const named: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };
      if (named[entity]) return named[entity];
      return String.fromCodePoint(
        entity.startsWith('#x') ? Number.parseInt(entity.slice(2), 16) : Number(entity.slice(1)),
      );
    });
  };
  /** Moves past the next `marker`, which must be there. */
  const past = (marker: string, what: string) => {
    const found = source.indexOf(marker, at);
    if (found < 0) fail(`an unclosed ${what}`);
    at = found + marker.length;
  };
  const skipMisc = () => {
    for (;;) {
      const rest = source.slice(at);
      const space = /^\s+/.exec(rest);
      if (space) at += space[0].length;
      else if (rest.startsWith('<?')) past('?>', 'declaration');
      else if (rest.startsWith('<!--')) past('-->', 'comment');
      else return;
    }
  };
  const element = (): XmlElement => {
    const open = /^<([A-Za-z_][\w.-]*)/.exec(source.slice(at)) ?? fail('an element was expected');
    at += open[0].length;
    const node: XmlElement = { name: open[1] as string, attributes: {}, children: [], text: '' };
    for (;;) {
      const attribute = /^\s+([A-Za-z_][\w.:-]*)\s*=\s*("([^"]*)"|'([^']*)')/.exec(source.slice(at));
      if (!attribute) break;
      const name = attribute[1] as string;
      if (name in node.attributes) fail(`attribute ${name} twice`);
      node.attributes[name] = decode(attribute[3] ?? attribute[4] ?? '');
      at += attribute[0].length;
    }
    const end = /^\s*(\/?)>/.exec(source.slice(at)) ?? fail(`the tag <${node.name}> is not closed`);
    at += end[0].length;
    if (end[1] === '/') return node;
    for (;;) {
      const rest = source.slice(at);
      if (rest.startsWith(`</${node.name}`)) {
        const close = new RegExp(`^</${node.name}\\s*>`).exec(rest) ?? fail(`a bad end tag of ${node.name}`);
        at += close[0].length;
        return node;
      }
      if (rest.startsWith('</')) fail(`an end tag that does not close <${node.name}>`);
      if (rest.startsWith('<![CDATA[')) {
        const start = at + 9;
        past(']]>', 'CDATA section');
        node.text += source.slice(start, at - 3);
      } else if (rest.startsWith('<!--')) {
        past('-->', 'comment');
      } else if (rest.startsWith('<')) {
        node.children.push(element());
      } else if (rest === '') {
        fail(`<${node.name}> is never closed`);
      } else {
        const next = source.indexOf('<', at);
        const raw = source.slice(at, next < 0 ? source.length : next);
        node.text += decode(raw);
        at += raw.length;
      }
    }
  };
  skipMisc();
  const root = element();
  skipMisc();
  if (at !== source.length) fail('content after the root element');
  return root;
}

describe('troupe eval dataset and a secured server', () => {
  it('logs in as every command with --server does: --creds and NATS_CREDS are read', async () => {
    const missing = join(tmpdir(), 'troupe-evals-no-such.creds');
    for (const args of [
      ['list'],
      ['show', 'notes'],
      ['add', 'notes', '--from-runs', '--pipeline', 'notes'],
    ]) {
      const server = ['--server', 'nats://127.0.0.1:1'];
      const given = await troupe(['eval', 'dataset', ...args, ...server, '--creds', missing]);
      expect(given.code, given.stderr).toBe(2);
      expect(given.stderr).toContain(`cannot read the credentials file ${missing}`);
      const fromEnv = await troupe(['eval', 'dataset', ...args, ...server], cliEnv({ NATS_CREDS: missing }));
      expect(fromEnv.code, fromEnv.stderr).toBe(2);
      expect(fromEnv.stderr).toContain(`cannot read the credentials file ${missing}`);
    }
  });
});
