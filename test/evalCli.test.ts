import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Experiment, ExperimentSummary } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';

/**
 * `troupe eval run` and `compare` as a CI job runs them: a dataset file, `--no-store`, no server anywhere (no NATS_URL,
 * no nats-server on PATH), two versions of a pipeline on scripted models; the exit codes are the gate.
 */
let dir: string;
let env: NodeJS.ProcessEnv;
const at = (name: string) => join(dir, name);

/** A pipeline whose writer's replies are `replies` (the same for every task). */
const pipeline = (name: string, replies: unknown[]) =>
  Promise.all([
    writeFile(at(`${name}.script.json`), JSON.stringify({ agents: { writer: replies } })),
    writeFile(
      at(`${name}.yaml`),
      `version: 1
name: greeter
models: { scripted: { provider: scripted, script: ./${name}.script.json } }
defaults: { model: scripted }
agents:
  writer:
    instructions: Write a greeting to notes/hello.md, then say hello.
    tools: [write_file]
    permissions: [{ tool: write_file, decision: allow, paths: ["notes/*.md"] }]
flow:
  - { id: write, kind: agent, agent: writer }
`,
    ),
  ]);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-eval-cli-'));
  await mkdir(at('bin'));
  env = cliEnv({ PATH: at('bin'), TROUPE_HOME: at('home') });
  await pipeline('good', [
    { toolCalls: [{ name: 'write_file', arguments: { path: 'notes/hello.md', content: '# Hello\n' } }] },
    { content: 'hello: wrote notes/hello.md' },
  ]);
  // Worse: the writer skips the tool and says something else.
  await pipeline('worse', [{ content: 'done' }]);
  await writeFile(
    at('greetings.yaml'),
    `name: greetings
scorers:
  - { type: contains, value: hello }
  - { type: cel, name: wrote the note, expr: 'tools.called("write_file") >= 1' }
cases:
  - { id: morning, goal: Greet the morning team }
  - { id: evening, goal: "Greet the evening team <& \\"friends\\">" }
`,
  );
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const run = (pipelineName: string, save: string, ...more: string[]) =>
  troupe(
    [
      'eval',
      'run',
      at('greetings.yaml'),
      '--pipeline',
      at(`${pipelineName}.yaml`),
      '--mode',
      'model',
      '--no-store',
      '--save',
      at(save),
      ...more,
    ],
    env,
    60_000,
  );

describe('troupe eval run and compare, with no server', () => {
  it('runs a dataset file against a pipeline, prints a line per case and the report, and saves the experiment', async () => {
    const result = await run('good', 'good.json', '--format', 'junit', '--name', 'good-1');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/running 2 cases of greetings@1 against .*good\.yaml \(model\)/);
    expect(result.stderr).toMatch(/\[1\/2\] (morning|evening) passed 1\.00 /);
    expect(result.stderr).toMatch(/\[2\/2\] (morning|evening) passed 1\.00 /);
    expect(result.stdout).toMatch(
      /^<\?xml version="1\.0" encoding="UTF-8"\?>\n<testsuites name="troupe eval" tests="2" failures="0" errors="0"/,
    );
    expect(result.stdout.match(/<testcase /g)).toHaveLength(2);
    expect(result.stdout).not.toContain('<failure');
    const saved = Experiment.parse(JSON.parse(await readFile(at('good.json'), 'utf8')));
    expect(saved).toMatchObject({ id: 'good-1', mode: 'model', dataset: { name: 'greetings', version: 1 } });
    expect(saved.cases.map((c) => [c.caseId, c.status, c.tools])).toEqual([
      ['morning', 'passed', ['write_file']],
      ['evening', 'passed', ['write_file']],
    ]);
  });

  it('exits 1 when a case fails its scorers, with the failures in the report', async () => {
    const result = await run('worse', 'worse.json', '--format', 'markdown', '--out', at('worse.md'));
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(`0 of 2 cases passed; report in ${at('worse.md')}`);
    const markdown = await readFile(at('worse.md'), 'utf8');
    expect(markdown).toContain('**0 of 2 passed** (0%)');
    expect(markdown).toContain('| Case | Status | Score | Failing | Cost | Duration |');
    expect(markdown).toContain(
      '- **morning**: contains "hello": 0.00 (threshold 1.00): the output lacks "hello": "done"',
    );
    expect(markdown).toMatch(/^- \*\*morning\*\*: wrote the note: 0\.00 \(threshold 1\.00\): /m);
  });

  it('compare exits 1 when B lost passes A had, and says which', async () => {
    const result = await troupe(['eval', 'compare', at('good.json'), at('worse.json')], env);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stdout).toMatch(/^morning\s+regressed\s+passed 1\.00\s+failed 0\.00\s+−1\.00/m);
    expect(result.stdout).toMatch(/^evening\s+regressed/m);
    expect(result.stdout).toContain(
      "verdict: worse — the mean score's 95% interval over 2 common cases is [−1.00, −1.00]: B scores lower.",
    );
    expect(result.stdout).toContain('passed: 2/2 (100%) → 0/2 (0%)');
    expect(result.stdout).toMatch(
      /^gate: FAILED — morning: passed in A, failed in B: contains "hello" \(the output lacks "hello": "done"\); .*; evening: .*; the mean score fell by 1\.00/m,
    );
  });

  it('compare exits 0 without a regression: a rerun of the same pipeline, and the worse one fixed', async () => {
    const again = await run('good', 'good-again.json', '--format', 'json');
    expect(again.code, again.stderr).toBe(0);
    expect(Experiment.parse(JSON.parse(again.stdout)).totals).toMatchObject({ cases: 2, passed: 2 });

    const same = await troupe(
      ['eval', 'compare', at('good.json'), at('good-again.json'), '--format', 'json'],
      env,
    );
    expect(same.code, same.stderr).toBe(0);
    const comparison = JSON.parse(same.stdout);
    expect(comparison.summary.verdict).toBe('no clear difference');
    expect(comparison.summary.counts).toMatchObject({ common: 2, unchanged: 2, regressed: 0 });
    expect(comparison.gate).toEqual({ passed: true, failures: [] });

    const fixed = await troupe(
      ['eval', 'compare', at('worse.json'), at('good.json'), '--format', 'markdown'],
      env,
    );
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toMatch(/^### Eval: 🟢 better — `good-1` against `/);
    expect(fixed.stdout).toContain('#### Improvements (2)');
  });

  it('shows a case of a saved experiment: its scores and its run as a trace', async () => {
    const result = await troupe(['eval', 'show', at('worse.json'), 'evening'], env);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^case evening of experiment .*: failed \(task completed\)/);
    expect(result.stdout).toMatch(/^ {2}FAIL {2}wrote the note: 0\.00 \(threshold 1\.00\): /m);
    expect(result.stdout).toMatch(/^task \S+ · greeter · completed/m);
  });

  it('exits 2 when it cannot run: no mode for unrecorded cases, a stored dataset with --no-store, a missing file', async () => {
    const noMode = await troupe(
      ['eval', 'run', at('greetings.yaml'), '--pipeline', at('good.yaml'), '--no-store'],
      env,
    );
    expect(noMode.code).toBe(2);
    expect(noMode.stderr).toContain('2 of the 2 cases of greetings@1 have no recording to replay');
    expect(noMode.stderr).toContain('pass --mode model');

    const stored = await troupe(
      ['eval', 'run', 'greetings@1', '--pipeline', at('good.yaml'), '--no-store'],
      env,
    );
    expect(stored.code).toBe(2);
    expect(stored.stderr).toContain(
      'greetings@1 names a stored dataset (a file ends in .yaml, .yml, .json or .jsonl), and the server cannot be reached to read it',
    );

    const missing = await troupe(['eval', 'compare', at('good.json'), at('nothing.json')], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(`troupe: ${at('nothing.json')}: no such file\n`);

    // A file that is not an experiment, given by a name with no path: it is read, and said not to be one.
    const yaml = await troupe(
      ['eval', 'compare', at('good.json'), 'greetings.yaml'],
      { ...env },
      60_000,
      dir,
    );
    expect(yaml.code).toBe(2);
    expect(yaml.stderr).toMatch(
      /^troupe: greetings\.yaml: not an experiment \(as troupe eval run --save writes one\): not JSON: /,
    );

    // Option values refused are usage errors: exit 2, as the docs say, not commander's 1.
    for (const refused of [
      ['run', at('greetings.yaml'), '--pipeline', at('good.yaml'), '--concurrency', '0'],
      ['run', at('greetings.yaml'), '--pipeline', at('good.yaml'), '--budget-usd', '-1'],
      ['compare', at('good.json'), at('worse.json'), '--format', 'xml'],
      ['compare', at('good.json'), at('worse.json'), '--max-cost-increase', '-5'],
    ]) {
      const result = await troupe(['eval', ...refused], env);
      expect(result.code, `${refused.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toMatch(/^troupe: option '--[a-z-]+ <[^>]+>' argument '[^']+' is invalid/);
    }
  });

  it('compare exits 2 when A and B have no case in common, and says when they ran different datasets or are one', async () => {
    const good = Experiment.parse(JSON.parse(await readFile(at('good.json'), 'utf8')));
    const elsewhere = {
      ...good,
      id: 'elsewhere',
      dataset: { name: 'regenerated', version: 1 },
      cases: good.cases.map((c) => ({ ...c, caseId: `new-${c.caseId}` })),
    };
    await writeFile(at('elsewhere.json'), JSON.stringify(elsewhere));
    const none = await troupe(['eval', 'compare', at('good.json'), at('elsewhere.json')], env);
    expect(none.code, none.stderr).toBe(2);
    expect(none.stdout).toBe('');
    expect(none.stderr).toBe(
      'troupe: nothing to compare: A good-1 (greetings@1) and B elsewhere (regenerated@1) have no case in common (they ran different datasets)\n',
    );

    await writeFile(
      at('renamed.json'),
      JSON.stringify({ ...good, id: 'renamed', dataset: { name: 'greetings', version: 2 } }),
    );
    const renamed = await troupe(['eval', 'compare', at('good.json'), at('renamed.json')], env);
    expect(renamed.code, renamed.stderr).toBe(0);
    const note =
      'A ran dataset greetings@1 and B ran greetings@2: their cases are matched by id across different datasets';
    expect(renamed.stderr).toBe(`note: ${note}\n`);
    expect(renamed.stdout).toContain(`\nnote: ${note}\n`);

    const itself = await troupe(
      ['eval', 'compare', at('good.json'), at('good.json'), '--format', 'json'],
      env,
    );
    expect(itself.code, itself.stderr).toBe(0);
    expect(itself.stderr).toBe('note: A and B are the same experiment (good-1)\n');
    expect(JSON.parse(itself.stdout).notes).toEqual(['A and B are the same experiment (good-1)']);

    // The comparison is made; only writing its report fails, and that is what it says.
    const unwritable = await troupe(
      ['eval', 'compare', at('good.json'), at('worse.json'), '--out', at('no-such-dir/x.md')],
      env,
    );
    expect(unwritable.code).toBe(2);
    expect(unwritable.stderr).toContain(
      `troupe: compared ${at('good.json')} with ${at('worse.json')} (worse, gate failed), but cannot write the report to ${at('no-such-dir/x.md')}: ENOENT`,
    );
  });
});

describe('troupe eval run, list, compare and show, with experiments stored on a server', () => {
  let nats: TestNats;
  let stored: NodeJS.ProcessEnv;
  const evalCli = (...args: string[]) => troupe(['eval', ...args], stored, 60_000);
  const runStored = (dataset: string, pipelineName: string, name: string) =>
    evalCli('run', dataset, '--pipeline', at(`${pipelineName}.yaml`), '--mode', 'model', '--name', name);

  beforeAll(async () => {
    nats = await startTestNats();
    stored = cliEnv({ PATH: at('bin'), TROUPE_HOME: at('home'), NATS_URL: nats.url });
  });
  afterAll(async () => {
    await nats?.stop();
  });

  it('stores a file dataset once and each experiment, lists them newest first and compares them by id', async () => {
    const good = await runStored(at('greetings.yaml'), 'good', 'stored-good');
    expect(good.code, good.stderr).toBe(0);
    expect(good.stderr).toContain(`stored ${at('greetings.yaml')} as dataset greetings@1`);
    expect(good.stderr).toContain('stored experiment stored-good');

    // The same file again is the version stored already; a stored dataset runs by its name.
    const worse = await runStored(at('greetings.yaml'), 'worse', 'stored-worse');
    expect(worse.code, worse.stderr).toBe(1);
    expect(worse.stderr).not.toContain('as dataset');
    const again = await runStored('greetings@1', 'good', 'stored-good-again');
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain('running 2 cases of greetings@1');

    const listed = await evalCli('list', '--json');
    expect(listed.code, listed.stderr).toBe(0);
    const summaries = listed.stdout
      .trim()
      .split('\n')
      .map((line) => ExperimentSummary.parse(JSON.parse(line)));
    expect(summaries.map((e) => [e.id, e.totals.passed])).toEqual([
      ['stored-good-again', 2],
      ['stored-worse', 0],
      ['stored-good', 2],
    ]);
    const table = await evalCli('list');
    expect(table.stdout.split('\n')[0]).toMatch(/^EXPERIMENT\s+DATASET\s+PIPELINE\s+MODE\s+PASSED/);
    expect(table.stdout).toMatch(/^stored-worse\s+greetings@1\s+greeter \w{12}\s+model\s+0\/2/m);

    const regressed = await evalCli('compare', 'stored-good', 'stored-worse');
    expect(regressed.code, regressed.stderr).toBe(1);
    expect(regressed.stdout).toMatch(/^morning\s+regressed/m);
    // A stored experiment against a saved file.
    const mixed = await evalCli('compare', 'stored-good-again', at('good.json'));
    expect(mixed.code, mixed.stderr).toBe(0);
    expect(mixed.stdout).toContain('gate: passed');

    const shown = await evalCli('show', 'stored-worse', 'morning');
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/^task \S+ · greeter · completed/m);

    const unknown = await evalCli('compare', 'stored-good', 'no-such-experiment');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('no experiment no-such-experiment is stored on this server');
  });
});
