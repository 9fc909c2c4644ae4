import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { STREAMS } from '@troupe/protocol';
import { startTestNats, TEST_MCP_STDIO_SERVER, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath, repoRoot } from './support/harness.ts';

describe('troupe graph', () => {
  it('draws a flow with a route, a parallel step and a condition as Mermaid, or as JSON', async () => {
    const drawn = await troupe(['graph', examplePath('triage.yaml')]);
    expect(drawn.code).toBe(0);
    expect(drawn.stdout.startsWith('flowchart TD\n')).toBe(true);
    for (const line of [
      '  s_triage{"triage<br/><i>route</i>"}',
      '  subgraph s_build__code ["build · code"]',
      '  s_triage -->|"= bug"| s_fix',
      '  s_fix --> s_summarize',
      '  s_build -->|"branch docs"| s_docs',
      '  s_summarize --> finish',
    ]) {
      expect(drawn.stdout.split('\n')).toContain(line);
    }
    expect(drawn.stdout).toContain('when steps.classify.output.risky');
    const json = JSON.parse((await troupe(['graph', examplePath('triage.yaml'), '--json'])).stdout);
    expect(json.nodes).toContainEqual({
      id: 'docs',
      kind: 'agent',
      agent: 'documenter',
      parent: 'build',
      branch: 'docs',
    });
    // The demo's review loop: the reject edge goes back, dotted.
    expect((await troupe(['graph', examplePath('demo.yaml')])).stdout).toContain(
      's_review -.->|"reject"| s_execute',
    );
  });

  it('refuses an invalid file as validate does', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-cli-'));
    const file = join(dir, 'bad.yaml');
    await writeFile(
      file,
      (await readFile(examplePath('triage.yaml'), 'utf8'))
        .replace('./triage.script.yaml', examplePath('triage.script.yaml'))
        .replace('cases: { bug: fix, feature: build }', 'cases: { bug: fixx, feature: build }'),
    );
    const result = await troupe(['graph', file]);
    await rm(dir, { recursive: true, force: true });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('flow[1].cases.bug: "fixx" is not a later step of the same list');
  });
});

describe('troupe validate', () => {
  it('accepts the demo pipeline and describes it', async () => {
    const result = await troupe(['validate', examplePath('demo.yaml')]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('pipeline demo');
    expect(result.stdout).toContain('review: reject → execute');
    // The version a coordinator started with the file records on its tasks (the trace test compares them).
    expect(result.stdout).toMatch(/; version [0-9a-f]{12}\n$/);
  });

  it('refuses a bad file with its file, line and path, and a suggestion', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-cli-'));
    const file = join(dir, 'bad.yaml');
    const text = (await readFile(examplePath('demo.yaml'), 'utf8'))
      .replace('./demo.script.yaml', join(import.meta.dirname, '..', 'examples', 'demo.script.yaml'))
      .replace('agent: reviewer', 'agent: reviewr');
    await writeFile(file, text);
    const result = await troupe(['validate', file]);
    await rm(dir, { recursive: true, force: true });
    const line = text.split('\n').findIndex((l) => l.includes('agent: reviewr')) + 1;
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`${file}:${line}:`);
    expect(result.stderr).toContain('flow[2].agent: no agent named "reviewr"');
    expect(result.stderr).toContain('did you mean "reviewer"');
  });

  it('names the agent and the variable when an API key is missing, and --no-keys skips that check', async () => {
    const missing = await troupe(
      ['validate', examplePath('anthropic.yaml')],
      cliEnv({ ANTHROPIC_API_KEY: '' }),
    );
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(
      'agents.executor.model: agent executor uses anthropic:claude-sonnet-4-6, which needs the environment variable ANTHROPIC_API_KEY; it is not set',
    );
    const skipped = await troupe(
      ['validate', '--no-keys', examplePath('openai.yaml'), examplePath('anthropic.yaml')],
      cliEnv({ OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '' }),
    );
    expect(skipped.code).toBe(0);
    expect(skipped.stdout).toContain('pipeline openai-demo');
    expect(skipped.stdout).toContain('pipeline anthropic-demo');
  });

  it('prints the resolved pipeline with defaults applied', async () => {
    const result = await troupe(['validate', '--print', examplePath('demo.yaml')]);
    expect(result.code).toBe(0);
    const resolved = JSON.parse(result.stdout);
    expect(resolved.flow[2]).toMatchObject({ kind: 'review', onMaxRounds: 'fail', maxRounds: 3 });
    expect(resolved.agents.planner.tools).toEqual([]);
  });
});

describe('troupe up, submit and tail against a NATS server', () => {
  let nats: TestNats;
  let home: string;
  let up: CliProcess;

  beforeAll(async () => {
    nats = await startTestNats();
    home = await mkdtemp(join(tmpdir(), 'troupe-home-'));
    up = startTroupe(
      [
        'up',
        examplePath('demo.yaml'),
        '--home',
        home,
        '--json',
        '--log-level',
        'info',
        '--events-max-age',
        '12h',
        '--events-max-bytes',
        '64MiB',
        '--metrics',
        '127.0.0.1:0',
        // Every step over NATS: the log test below reads each step request and reply as the hosts log them, and a
        // step run in-process (the default for agents this process hosts) is no message.
        '--no-local-steps',
      ],
      cliEnv({ NATS_URL: nats.url }),
    );
    await up.waitFor(/troupe is up on/);
  });

  it('keeps events as long and as much as --events-max-age and --events-max-bytes say', async () => {
    const client = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(client);
      const { config } = await jsm.streams.info(STREAMS.events);
      expect(config.max_age).toBe(12 * 3_600 * 1e9);
      expect(config.max_bytes).toBe(64 * 1_048_576);
      expect(config.discard).toBe('old');
    } finally {
      await client.close();
    }
  });

  it('refuses a retention it cannot read, before starting anything', async () => {
    const result = await troupe([
      'up',
      examplePath('demo.yaml'),
      '--events-max-bytes',
      'lots',
      '--server',
      nats.url,
    ]);
    // As for every option commander refuses: exit 1, with the usage.
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("option '--events-max-bytes <size>' argument 'lots' is invalid");
    expect(result.stderr).toContain('must be a size such as 512MiB');
  });
  afterAll(async () => {
    await up?.stop();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('submits a task and follows it to completion with --wait', async () => {
    const result = await troupe([
      'submit',
      'demo',
      'Write a hello note',
      '--wait',
      '--id',
      'cli-1',
      '--server',
      nats.url,
    ]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/demo\/cli-1 .* task\.accepted/);
    expect(result.stdout).toMatch(/reviewer → executor .* agent\.handoff .* rework/);
    expect(result.stdout).toMatch(/task\.completed .* 2 round\(s\)/);
    expect(await readFile(join(home, 'workspaces', 'demo', 'cli-1', 'notes', 'hello.md'), 'utf8')).toContain(
      'reviewed and approved',
    );
  });

  it('traces a finished task as a tree of steps, calls and totals, and as JSON', async () => {
    const result = await troupe(['trace', 'cli-1', '--server', nats.url]);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^task cli-1 · demo@[0-9a-f]{12} · completed in /);
    expect(lines.filter((l) => /^[├└]─ /.test(l)).map((l) => l.split(' · ').slice(0, 3).join(' · '))).toEqual(
      [
        '├─ plan · planner · round 1',
        '├─ execute · executor · round 1',
        '├─ review · reviewer · round 1',
        '├─ execute · executor · round 2',
        '└─ review · reviewer · round 2',
      ],
    );
    expect(result.stdout).toMatch(/─ tool write_file\(.*notes\/hello\.md.*\) · allow · ok · /);
    expect(result.stdout).toMatch(/─ model scripted:\S+ · turn 1 · \d+→\d+ tok/);
    expect(lines.at(-1)).toMatch(/^totals: 11 model calls · \d+→\d+ tok · \$\d+\.\d{4} · \d+ tool calls/);

    const json = await troupe(['trace', 'cli-1', '--json', '--server', nats.url]);
    const tree = JSON.parse(json.stdout);
    expect(tree).toMatchObject({
      taskId: 'cli-1',
      pipeline: 'demo',
      version: expect.stringMatching(/^[0-9a-f]{64}$/),
      status: 'completed',
      totals: { modelCalls: 11 },
    });
    expect(tree.steps).toHaveLength(5);
    // The version troupe validate names for the file the coordinator runs.
    const validated = await troupe(['validate', examplePath('demo.yaml')]);
    expect(validated.stdout).toContain(`; version ${tree.version.slice(0, 12)}\n`);
    const toolEntries = tree.steps.flatMap((step: { entries: { kind: string }[] }) =>
      step.entries.filter((entry) => entry.kind === 'tool'),
    );
    expect(tree.totals.toolCalls).toBe(toolEntries.length);
    expect(lines.filter((l) => l.includes('─ tool '))).toHaveLength(toolEntries.length);
    expect(tree.steps[2].outcome.verdict.decision).toBe('reject');
  });

  it('serves Prometheus metrics of what it ran with --metrics', async () => {
    const url = /serving metrics on (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(up.output())?.[1];
    expect(url, up.output()).toBeDefined();
    const text = await (await fetch(url as string)).text();
    const value = (series: string) =>
      Number(
        text
          .split('\n')
          .find((line) => line.startsWith(`${series} `))
          ?.split(' ')[1],
      );
    // cli-1 ran here, its agents too: the task, its steps, its model calls and tool calls are counted.
    expect(value('troupe_tasks_total{pipeline="demo",outcome="completed"}')).toBeGreaterThanOrEqual(1);
    expect(value('troupe_steps_total{pipeline="demo",agent="reviewer",outcome="ok"}')).toBeGreaterThanOrEqual(
      2,
    );
    expect(text).toMatch(/^troupe_model_calls_total\{provider="scripted",model="[^"]+",outcome="ok"\} \d+$/m);
    expect(text).toMatch(/^troupe_tool_calls_total\{tool="write_file",decision="allow",outcome="ok"\} \d+$/m);
    expect(text).toMatch(
      /^troupe_task_duration_seconds_bucket\{le="\+Inf",pipeline="demo",outcome="completed"\} \d+$/m,
    );
    expect(value('troupe_event_outbox_backlog')).toBe(0);
  });

  it('exits on SIGTERM while serving metrics', async () => {
    const other = startTroupe(
      ['up', examplePath('demo.yaml'), '--no-agents', '--join', '--home', home, '--metrics', '127.0.0.1:0'],
      cliEnv({ NATS_URL: nats.url }),
    );
    await other.waitFor(/troupe is up on/);
    other.child.kill('SIGTERM');
    try {
      // Exits by itself once stopped: a metrics server left listening would keep it up.
      await expect.poll(() => other.child.exitCode, { timeout: 20_000 }).toBe(0);
    } finally {
      if (other.child.exitCode === null) await other.stop('SIGKILL');
    }
  });

  it('replays a recorded task offline: the same facts against its pipeline, a divergence against an edited one', async () => {
    const same = await troupe([
      'replay',
      'cli-1',
      '--pipeline',
      examplePath('demo.yaml'),
      '--server',
      nats.url,
    ]);
    expect(same.code, same.stdout + same.stderr).toBe(0);
    expect(same.stdout).toMatch(
      /^replayed task cli-1 against .*demo\.yaml: the same \d+ facts as recorded$/m,
    );

    // The edit: the executor may no longer write Markdown; its first write is now denied.
    const dir = await mkdtemp(join(tmpdir(), 'troupe-replay-'));
    const edited = join(dir, 'demo.yaml');
    await writeFile(
      edited,
      (await readFile(examplePath('demo.yaml'), 'utf8'))
        .replace('./demo.script.yaml', join(import.meta.dirname, '..', 'examples', 'demo.script.yaml'))
        .replace(
          '{ tool: write_file, decision: allow, paths: ["**/*.md"] }',
          '{ tool: write_file, decision: deny, paths: ["**/*.md"] }',
        ),
    );
    // With the tools' results from the record, nothing runs, and the replay still matches.
    const recorded = await troupe([
      'replay',
      'cli-1',
      '--pipeline',
      examplePath('demo.yaml'),
      '--no-tools',
      '--server',
      nats.url,
    ]);
    expect(recorded.code, recorded.stdout + recorded.stderr).toBe(0);
    expect(recorded.stdout).toMatch(/the same \d+ facts as recorded/);
    const diverged = await troupe(['replay', 'cli-1', '--pipeline', edited, '--server', nats.url]);
    await rm(dir, { recursive: true, force: true });
    expect(diverged.code, diverged.stdout + diverged.stderr).toBe(1);
    expect(diverged.stdout).toMatch(/diverged at fact \d+ of \d+/);
    expect(diverged.stdout).toMatch(/ {2}recorded: step execute, turn \d+, call 0: allow, ok/);
    expect(diverged.stdout).toMatch(/ {2}replayed: step execute, turn \d+, call 0: deny, failed/);
  });

  it('replays against the one file here that declares the pipeline when none is given, and never guesses', async () => {
    const found = await troupe(
      ['replay', 'cli-1', '--no-tools', '--server', nats.url],
      cliEnv(),
      30_000,
      join(repoRoot, 'examples'),
    );
    expect(found.code, found.stdout + found.stderr).toBe(0);
    expect(found.stderr).toContain(`replaying against ${examplePath('demo.yaml')}`);
    expect(found.stdout).toMatch(
      /^replayed task cli-1 against .*demo\.yaml: the same \d+ facts as recorded$/m,
    );

    const dir = await mkdtemp(join(tmpdir(), 'troupe-replay-find-'));
    try {
      const none = await troupe(['replay', 'cli-1', '--server', nats.url], cliEnv(), 30_000, dir);
      expect(none.code).toBe(2);
      expect(none.stderr).toContain('declares pipeline demo; give the file with --pipeline <file>');
      const text = await readFile(examplePath('demo.yaml'), 'utf8');
      await writeFile(join(dir, 'a.yaml'), text);
      await writeFile(join(dir, 'b.yml'), text);
      const two = await troupe(['replay', 'cli-1', '--server', nats.url], cliEnv(), 30_000, dir);
      expect(two.code).toBe(2);
      expect(two.stderr).toContain('2 files in');
      expect(two.stderr).toContain('say which with --pipeline <file>');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says plainly when trace is asked for a task nobody knows', async () => {
    const result = await troupe(['trace', 'no-such-task', '--server', nats.url]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('no task no-such-task is known on this server');
  });

  it('prints just the id without --wait, and says so when the id was already submitted', async () => {
    const first = await troupe(['submit', 'demo', 'again', '--id', 'cli-2', '--server', nats.url]);
    expect(first.code).toBe(0);
    expect(first.stdout.trim()).toBe('cli-2');
    const again = await troupe(['submit', 'demo', 'again', '--id', 'cli-2', '--server', nats.url]);
    expect(again.stderr).toContain('task cli-2 was already submitted; not run again');
  });

  it('refuses a task for a pipeline no coordinator has loaded, and a bad task, before publishing', async () => {
    const unknown = await troupe(['submit', 'nope', 'x', '--server', nats.url]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no coordinator has loaded a pipeline named "nope"; loaded: demo');
    const badId = await troupe(['submit', 'demo', 'x', '--id', 'has.dot', '--server', nats.url]);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('invalid task: id:');
  });

  it('tails the live flow as JSON lines', async () => {
    const tail = startTroupe(['tail', '--json', '--task', 'cli-3'], cliEnv({ NATS_URL: nats.url }));
    await tail.waitFor(/watching task cli-3/);
    const submitted = await troupe(['submit', 'demo', 'tail me', '--id', 'cli-3', '--server', nats.url]);
    expect(submitted.code).toBe(0);
    await tail.waitFor(/"kind":"task.completed"/);
    // Following one task, tail ends by itself when the task ends (a signal now would race its exit).
    expect(await tail.exited()).toBe(0);
    expect(tail.output()).toContain('task cli-3 has finished: completed');
    const events = tail
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    expect(events.every((e) => e.taskId === 'cli-3')).toBe(true);
    expect(events[0].kind).toBe('task.accepted');
    expect(events.at(-1).kind).toBe('task.completed');
  });

  it('logs one JSON line per message with subject, task, from, to and kind', () => {
    const lines = up
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    const handoffs = lines.filter(
      (l) => l.dir === 'out' && l.kind === 'agent.handoff' && l.taskId === 'cli-1',
    );
    expect(handoffs.map((l) => `${l.from}>${l.to}`)).toEqual([
      'task>planner',
      'planner>executor',
      'executor>reviewer',
      'reviewer>executor',
      'executor>reviewer',
    ]);
    expect(handoffs[0].subject).toBe('troupe.events.demo.cli-1.agent.handoff');
    const received = lines.filter(
      (l) => l.dir === 'in' && l.subject === 'troupe.agents.demo.executor' && l.taskId === 'cli-1',
    );
    expect(received).toHaveLength(2);
    // A step's reply is from its agent to the workflow, on both sides of the wire.
    for (const dir of ['out', 'in']) {
      const replies = lines.filter((l) => l.dir === dir && l.kind === 'agent.reply' && l.taskId === 'cli-1');
      expect(replies.map((l) => `${l.from}>${l.to}`)).toEqual([
        'planner>workflow',
        'executor>workflow',
        'reviewer>workflow',
        'executor>workflow',
        'reviewer>workflow',
      ]);
    }
  });

  it('logs each task delivery once, in one line from the runner that gets it', () => {
    const deliveries = jsonLines(up.output()).filter(
      (l) => l.dir === 'in' && l.subject === 'troupe.tasks.demo' && l.level === 30,
    );
    expect(deliveries.map((l) => `${l.taskId} ${l.from}>${l.to} ${l.kind}`).sort()).toEqual([
      'cli-1 user>demo task',
      'cli-2 user>demo task',
      'cli-3 user>demo task',
    ]);
  });

  it('writes each key once on a JSON line', () => {
    const lines = up
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'));
    expect(lines.length).toBeGreaterThan(50);
    const repeating = lines.filter((l) => keysAsWritten(l).length !== Object.keys(JSON.parse(l)).length);
    expect(repeating).toEqual([]);
  });

  it('logs a refused task once, as a warning that says why', async () => {
    const client = await connect({ servers: nats.url });
    const before = up.output().length;
    try {
      client.publish('troupe.tasks.demo', JSON.stringify({ gaol: 'typo' }));
      client.publish('troupe.tasks.nope', JSON.stringify({ goal: 'nobody runs this' }));
      await client.flush();
      await up.waitFor(/task on troupe\.tasks\.nope not run now/);
      await up.waitFor(/task for pipeline demo refused/);
      // Time for a second line about either, if there were one.
      await new Promise((resolve) => setTimeout(resolve, 500));
    } finally {
      await client.close();
    }
    const about = jsonLines(up.output().slice(before)).filter((l) => l.subject?.startsWith('troupe.tasks.'));
    expect(about.map((l) => [l.level, l.subject]).sort()).toEqual([
      [40, 'troupe.tasks.demo'],
      [40, 'troupe.tasks.nope'],
    ]);
    expect(about.find((l) => l.subject === 'troupe.tasks.demo')?.msg).toMatch(
      /^task for pipeline demo refused: payload failed validation: .*gaol/,
    );
    expect(about.find((l) => l.subject === 'troupe.tasks.nope')).toMatchObject({
      reason:
        'no pipeline named "nope" is loaded; loaded: demo; the task is kept and runs once a coordinator serves "nope"',
      dir: 'in',
      kind: 'task',
    });
  });
});

type LogLine = { level: number; msg: string } & Partial<
  Record<'dir' | 'subject' | 'taskId' | 'from' | 'to' | 'kind' | 'reason', string>
>;

/** The JSON log lines in a process's output. */
function jsonLines(output: string): LogLine[] {
  return output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
}

/** The keys of a JSON object's line as written, a repeated one each time (JSON.parse keeps one of them). */
function keysAsWritten(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let keyNext = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '"') {
      let end = i + 1;
      while (line[end] !== '"') end += line[end] === '\\' ? 2 : 1;
      if (depth === 1 && keyNext) keys.push(JSON.parse(line.slice(i, end + 1)));
      keyNext = false;
      i = end;
    } else if (c === '{' || c === '[') {
      depth++;
      keyNext = depth === 1;
    } else if (c === '}' || c === ']') {
      depth--;
    } else if (c === ',') {
      keyNext = depth === 1;
    }
  }
  return keys;
}

describe('troupe submit against a server no coordinator has used', () => {
  it('says so plainly instead of failing with a stack trace', async () => {
    const nats = await startTestNats();
    try {
      const result = await troupe(['submit', 'demo', 'x', '--server', nats.url]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('no Troupe coordinator has run on');
      expect(result.stderr).not.toMatch(/\n\s+at /);
    } finally {
      await nats.stop();
    }
  });
});

describe('troupe up with an embedded nats-server', () => {
  it('starts its own server, records it for submit, and stops it on SIGTERM', async () => {
    const home = await mkdtemp(join(tmpdir(), 'troupe-home-'));
    const up = startTroupe(['up', examplePath('demo.yaml'), '--home', home, '--json']);
    try {
      await up.waitFor(/embedded nats-server/);
      const record = JSON.parse(await readFile(join(home, 'server.json'), 'utf8'));
      expect(record.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
      expect(record.url).not.toContain(':4222');

      const result = await troupe(['submit', 'demo', 'embedded', '--wait', '--home', home]);
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('task.completed');
    } finally {
      expect(await up.stop('SIGTERM')).toBe(0);
    }
    await expect(readFile(join(home, 'server.json'), 'utf8')).rejects.toThrow();
    const result = await troupe(['submit', 'demo', 'nobody home', '--home', home]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('no NATS server to talk to');
    await rm(home, { recursive: true, force: true });
  });
});

describe('troupe up when an MCP server cannot be used', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-mcp-up-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const pipeline = async (name: string, args: string[], tools: string): Promise<string> => {
    const file = join(dir, `${name}.yaml`);
    await writeFile(
      file,
      `version: 1
name: ${name}
models: { scripted: { provider: scripted, script: ${JSON.stringify(examplePath('demo.script.yaml'))} } }
defaults: { model: scripted }
mcpServers:
  files: { transport: stdio, command: ${JSON.stringify(process.execPath)}, args: ${JSON.stringify(args)}, timeout: 20 }
agents:
  planner: { instructions: Plan., tools: [${tools}] }
flow:
  - { id: plan, kind: agent, agent: planner }
`,
    );
    return file;
  };

  /** nats-server processes still running on this home's data directory. */
  const serversOn = async (home: string): Promise<string[]> => {
    const { readdir, readFile: read } = await import('node:fs/promises');
    const found: string[] = [];
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      const cmdline = await read(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.includes('nats-server') && cmdline.includes(home)) found.push(pid);
    }
    return found;
  };

  it('exits 1 promptly when the server exits at once, stopping the nats-server it started', async () => {
    const home = join(dir, 'home-exits');
    const file = await pipeline(
      'dies',
      ['-e', 'process.stderr.write("no such directory\\n"); process.exit(1)'],
      'files.read',
    );
    const result = await troupe(['up', file, '--home', home, '--allow-mcp-commands'], cliEnv(), 40_000);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toMatch(/MCP server files \(stdio: .*\) failed to start: .*no such directory/s);
    expect(await serversOn(home)).toEqual([]);
  });

  it('exits 2 promptly when an agent names a tool the server does not offer', async () => {
    const home = join(dir, 'home-missing');
    const file = await pipeline('lacks', ['--import', 'tsx', TEST_MCP_STDIO_SERVER], 'files.read_file');
    const result = await troupe(['up', file, '--home', home, '--allow-mcp-commands'], cliEnv(), 40_000);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain('MCP server files offers no tool "files.read_file"');
    expect(await serversOn(home)).toEqual([]);
  });
});

describe('the small things a new user meets first', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-firsts-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('prints its version', async () => {
    const cli = JSON.parse(await readFile(join(repoRoot, 'apps', 'cli', 'package.json'), 'utf8'));
    const result = await troupe(['--version']);
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(cli.version);
  });

  it('says a pipeline file is missing, or empty, in those words', async () => {
    const missing = await troupe(['up', join(dir, 'nothere.yaml')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(`troupe: ${join(dir, 'nothere.yaml')}: no such file\n`);
    const empty = join(dir, 'empty.yaml');
    await writeFile(empty, '');
    const validated = await troupe(['validate', empty]);
    expect(validated.code).toBe(1);
    expect(validated.stderr).toContain(`${empty}: the file is empty`);
  });

  it('counts in words: 1 agent, 2 agents', async () => {
    const one = join(dir, 'solo.yaml');
    await writeFile(
      one,
      `version: 1
name: solo
models: { scripted: { provider: scripted, script: ${JSON.stringify(examplePath('demo.script.yaml'))} } }
defaults: { model: scripted }
agents: { planner: { instructions: Plan. } }
flow: [{ id: plan, kind: agent, agent: planner }]
`,
    );
    expect((await troupe(['validate', one])).stdout).toContain('pipeline solo — 1 agent; flow: plan');
    expect((await troupe(['validate', examplePath('demo.yaml')])).stdout).toContain('3 agents;');
  });

  it('has every command the docs name', async () => {
    const help = await troupe(['--help']);
    const commands = new Set([...help.stdout.matchAll(/^ {2}([a-z][a-z-]*) /gm)].map((m) => m[1]));
    expect(commands).toContain('up');
    const docs = [
      join(repoRoot, 'README.md'),
      ...(await readdir(join(repoRoot, 'docs')))
        .filter((f) => f.endsWith('.md'))
        .map((f) => join(repoRoot, 'docs', f)),
    ];
    const unknown: string[] = [];
    for (const file of docs) {
      const text = await readFile(file, 'utf8');
      // `troupe <command>` in code, and a command line in a code block.
      for (const m of text.matchAll(/(?:`|^\$? ?)troupe ([a-z][a-z-]*)/gm)) {
        if (!commands.has(m[1] as string)) unknown.push(`${file.slice(repoRoot.length + 1)}: troupe ${m[1]}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it('marks required options in help', async () => {
    const help = await troupe(['nats-config', '--help']);
    expect(help.stdout).toMatch(/--out <dir>\s+where to write[\s\S]*\(required\)/);
  });

  it('answers a usage error with one line that points to the help, not the whole help', async () => {
    const missing = await troupe(['submit', 'demo']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe("troupe: missing required argument 'goal' (see troupe submit --help)\n");
    const unknown = await troupe(['sumbit']);
    expect(unknown.stderr).toBe(
      "troupe: unknown command 'sumbit' (Did you mean submit?) (see troupe --help)\n",
    );
    const refused = await troupe(['runs', '--limit', 'x']);
    expect(refused.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(refused.stderr).toContain('(see troupe runs --help)');
    expect(refused.stdout).toBe('');
  });

  it('takes the reason of a deny after its id, and refuses a deny without one', async () => {
    const help = await troupe(['deny', '--help']);
    expect(help.stdout).toContain('Usage: troupe deny [options] <approval-id> [reason]');
    const none = await troupe(['deny', 'ap-1']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('troupe deny needs a reason');
    const twice = await troupe(['deny', 'ap-1', 'one reason', '--reason', 'another']);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('give the reason once');
  });

  it('writes a starter pipeline with troupe init that runs at once, offline', async () => {
    const project = join(dir, 'Starter Project');
    const result = await troupe(['init', project]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('(pipeline starter-project)');
    expect(await readFile(join(project, '.gitignore'), 'utf8')).toContain('.troupe/\n');
    expect((await troupe(['validate', join(project, 'pipeline.yaml')])).code).toBe(0);
    const ran = await troupe(['demo', 'pipeline.yaml', '--goal', 'Write a haiku'], cliEnv(), 60_000, project);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toContain('task.completed');
    // Nothing is overwritten, and the ignore entry is not added twice.
    const again = await troupe(['init', project]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('pipeline.yaml already exists; nothing was written');
    expect((await readFile(join(project, '.gitignore'), 'utf8')).match(/\.troupe\//g)).toHaveLength(1);
  });

  it('exits 0 when Ctrl-C reaches it twice at once, as npx passes it on', async () => {
    const home = join(dir, 'home-ctrl-c');
    const up = startTroupe(['up', examplePath('demo.yaml'), '--home', home]);
    await up.waitFor(/troupe is up/);
    up.child.kill('SIGINT');
    up.child.kill('SIGINT');
    expect(await up.stop('SIGINT')).toBe(0);
  });
});
