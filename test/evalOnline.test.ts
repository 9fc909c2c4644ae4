import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readTaskEvents } from '@troupe/client';
import type { TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import {
  fixturePath,
  found,
  type Harness,
  ofKind,
  publishTask,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

/**
 * A pipeline's `evals:` block scores its live tasks as they end: `troupe up` a scripted pipeline whose block has a
 * scorer that passes, one that fails and one that throws, submit tasks, and read each task's `eval.scored` after its
 * final event, the metrics on `--metrics`, and the line `troupe tail` prints.
 */
const pipeline = (evals: string) => `
version: 1
name: online
models:
  scripted: { provider: scripted, script: ./online.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: Say when it is done. }
flow:
  - { id: write, kind: agent, agent: writer }
${evals}
`;

const EVALS = `
evals:
  sample: 1
  scorers:
    - { type: contains, name: says done, value: done }
    - { type: regex, name: digits only, pattern: '^\\d+$' }
    - { type: module, name: broken, path: ./throws.mjs }
`;

describe('online scoring of a pipeline with an evals block', () => {
  let nats: TestNats;
  let dir: string;
  let up: CliProcess;
  let tail: CliProcess;
  let bus: NatsBus;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    nats = await startTestNats();
    env = cliEnv({ NATS_URL: nats.url });
    dir = await mkdtemp(join(tmpdir(), 'troupe-online-'));
    await writeFile(join(dir, 'online.yaml'), pipeline(EVALS));
    // Its sample takes no task: no score comes, and nothing waits for one.
    await writeFile(
      join(dir, 'unsampled.yaml'),
      pipeline(EVALS.replace('sample: 1', 'sample: 0')).replace('name: online', 'name: unsampled'),
    );
    // Its score comes only when the test lets it (`release`), after the task's end: a watcher that stops at the final
    // event misses it.
    await writeFile(
      join(dir, 'slowscored.yaml'),
      pipeline('evals:\n  scorers:\n    - { type: module, name: slow, path: ./slow.mjs }').replace(
        'name: online',
        'name: slowscored',
      ),
    );
    await writeFile(
      join(dir, 'slow.mjs'),
      [
        "import { existsSync } from 'node:fs';",
        '// Scores 1 once the file release-<task id> beside it exists (the test writes it).',
        'export const score = (run) =>',
        '  new Promise((resolve) => {',
        "    const gate = new URL('./release-' + run.taskId, import.meta.url);",
        '    const check = setInterval(() => {',
        '      if (existsSync(gate)) {',
        '        clearInterval(check);',
        '        resolve(1);',
        '      }',
        '    }, 20);',
        '  });',
        '',
      ].join('\n'),
    );
    // Its scorer never answers: a score is due up to 40 s after the task's end and never comes.
    await writeFile(
      join(dir, 'stuckscored.yaml'),
      pipeline(
        'evals:\n  scorers:\n    - { type: module, name: stuck, path: ./stuck.mjs, timeoutMs: 30000 }',
      ).replace('name: online', 'name: stuckscored'),
    );
    await writeFile(join(dir, 'stuck.mjs'), 'export const score = () => new Promise(() => {});\n');
    await writeFile(join(dir, 'online.script.yaml'), 'agents:\n  writer:\n    - content: all done\n');
    await writeFile(
      join(dir, 'throws.mjs'),
      "export const score = () => { throw new Error('this scorer is broken on purpose'); };\n",
    );
    up = startTroupe(
      [
        'up',
        join(dir, 'online.yaml'),
        join(dir, 'unsampled.yaml'),
        join(dir, 'slowscored.yaml'),
        join(dir, 'stuckscored.yaml'),
        '--home',
        join(dir, 'home'),
        '--json',
        '--log-level',
        'info',
        '--metrics',
        '127.0.0.1:0',
      ],
      env,
    );
    await up.waitFor(/troupe is up on/, 60_000);
    tail = startTroupe(['tail', '--pipeline', 'online', '--kind', 'eval.scored'], env);
    bus = await NatsBus.connect({
      servers: nats.url,
      name: 'eval-online-test',
      logger: createLogger({ level: 'silent' }),
    });
  }, 90_000);

  afterAll(async () => {
    await tail?.stop();
    await up?.stop();
    await bus?.close();
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const scoredOf = async (taskId: string): Promise<TroupeEvent[]> => {
    const events = await readTaskEvents(bus, taskId, 'online');
    return events.filter((event) => event.kind === 'eval.scored');
  };

  it("publishes eval.scored after each task's final event, with its scores, and the task completes all the same", async () => {
    for (const id of ['on-1', 'on-2']) {
      const submitted = await troupe(['submit', 'online', 'say when done', '--id', id, '--server', nats.url]);
      expect(submitted.code, submitted.stderr).toBe(0);
    }
    for (const id of ['on-1', 'on-2']) {
      await expect.poll(async () => (await scoredOf(id)).length, { timeout: 30_000 }).toBe(1);
      const events = await readTaskEvents(bus, id, 'online');
      const kinds = events.map((event) => event.kind);
      // After the final event: the task was settled before it was scored.
      expect(kinds.indexOf('eval.scored')).toBeGreaterThan(kinds.indexOf('task.completed'));
      expect(kinds).toContain('task.completed');
      const scored = events.find((event) => event.kind === 'eval.scored');
      if (scored?.kind !== 'eval.scored') throw new Error('no eval.scored');
      expect(scored.data).toMatchObject({ status: 'completed', pass: false, sample: 1, costUsd: 0 });
      expect(scored.data.scores.map((s) => [s.scorer, s.value, s.pass])).toEqual([
        ['says done', 1, true],
        ['digits only', 0, false],
        ['broken', 0, false],
      ]);
      expect(scored.data.scores[2]?.reason).toBe('error: this scorer is broken on purpose');
    }
    const status = await troupe(['status', 'on-1', '--server', nats.url]);
    expect(status.stdout).toContain('completed');
  });

  it('counts the scores per scorer on the metrics endpoint', async () => {
    const url = /serving metrics on (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(up.output())?.[1];
    expect(url, up.output()).toBeDefined();
    // A series' value: what follows its name and labels (a label value may hold a space).
    const value = async (series: string) => {
      const text = await (await fetch(url as string)).text();
      const line = text.split('\n').find((l) => l.startsWith(`${series} `));
      return Number(line?.slice(series.length + 1));
    };
    await expect
      .poll(() => value('troupe_eval_checks_total{pipeline="online",scorer="says done",result="pass"}'))
      .toBe(2);
    expect(
      await value('troupe_eval_checks_total{pipeline="online",scorer="digits only",result="fail"}'),
    ).toBe(2);
    expect(await value('troupe_eval_checks_total{pipeline="online",scorer="broken",result="error"}')).toBe(2);
    expect(await value('troupe_eval_score_count{pipeline="online",scorer="says done"}')).toBe(2);
    expect(await value('troupe_eval_score_sum{pipeline="online",scorer="says done"}')).toBe(2);
    expect(await value('troupe_eval_score_bucket{le="0",pipeline="online",scorer="digits only"}')).toBe(2);
  });

  it('shows each score in one line of troupe tail', async () => {
    await tail.waitFor(/online\/on-2 .*eval\.scored .*FAIL 1\/3 · says done 1\.00 · digits only 0\.00 ✗/);
    expect(tail.output()).toContain('broken 0.00 ✗ error: this scorer is broken on purpose');
  });

  /** Once task `taskId` of `slowscored` has its final event stored, lets its scorer answer (see `slow.mjs`). */
  async function release(taskId: string): Promise<void> {
    await expect
      .poll(async () => (await readTaskEvents(bus, taskId, 'slowscored')).map((e) => e.kind), {
        timeout: 30_000,
      })
      .toContain('task.completed');
    await writeFile(join(dir, `release-${taskId}`), '');
  }

  /** The JSON lines of a CLI's output (events, and a result with no `kind`), in order. */
  const jsonLines = (output: string): { kind?: string; taskId?: string }[] =>
    output
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { kind?: string });

  it('troupe submit --wait shows the online score after the final event, then the result, and exits as the task ended', async () => {
    const args = [
      'submit',
      'slowscored',
      'say when done',
      '--id',
      'on-wait',
      '--wait',
      '--json',
      '--server',
      nats.url,
    ];
    const waited = startTroupe(args, env);
    // The score is let through only once the CLI says it waits for it: let through as soon as the task ended, it
    // could come while the CLI looked up how long to wait (on a busy machine), and no wait would be said.
    await waited.waitFor(/waiting up to 70 s for task on-wait's online score/, 60_000);
    await release('on-wait');
    expect(await waited.exited(), waited.output()).toBe(0);
    const kinds = jsonLines(waited.output()).map((line) => line.kind);
    expect(kinds.slice(-3)).toEqual(['task.completed', 'eval.scored', undefined]);
  });

  it('troupe tail --task shows the online score of the task it follows, and stops after it', async () => {
    const follow = startTroupe(['tail', '--task', 'on-tail', '--json', '--server', nats.url], env);
    try {
      await follow.waitFor(/watching task on-tail/);
      const submitted = await troupe([
        'submit',
        'slowscored',
        'say when done',
        '--id',
        'on-tail',
        '--server',
        nats.url,
      ]);
      expect(submitted.code, submitted.stderr).toBe(0);
      await release('on-tail');
      expect(await follow.exited()).toBe(0);
      const lines = jsonLines(follow.output());
      expect(lines.map((line) => line.kind).slice(-2)).toEqual(['task.completed', 'eval.scored']);
      expect(lines.at(-1)?.taskId).toBe('on-tail');
    } finally {
      await follow.stop();
    }
  });

  it('troupe tail --task of a task that ended a moment ago waits for the online score still to come', async () => {
    const submitted = await troupe([
      'submit',
      'slowscored',
      'say when done',
      '--id',
      'on-late',
      '--server',
      nats.url,
    ]);
    expect(submitted.code, submitted.stderr).toBe(0);
    await expect
      .poll(async () => (await readTaskEvents(bus, 'on-late', 'slowscored')).map((e) => e.kind), {
        timeout: 30_000,
      })
      .toContain('task.completed');
    const tailed = startTroupe(['tail', '--task', 'on-late', '--json', '--server', nats.url], env);
    try {
      // The task has ended and tail knows it; the score comes only now.
      await tailed.waitFor(/waiting up to \d+ s for task on-late's online score/);
      await release('on-late');
      expect(await tailed.exited()).toBe(0);
      expect(
        jsonLines(tailed.output())
          .map((line) => line.kind)
          .slice(-2),
      ).toEqual(['task.completed', 'eval.scored']);
      expect(tailed.output()).toContain('has finished: completed; nothing more will come');
    } finally {
      await tailed.stop();
    }
  });

  it('troupe submit --wait and tail --task stop at the final event when the sample leaves the task out', async () => {
    const args = [
      'submit',
      'unsampled',
      'say when done',
      '--id',
      'off-1',
      '--wait',
      '--json',
      '--server',
      nats.url,
    ];
    const result = await troupe(args, env, 90_000);
    expect(result.code, result.stderr).toBe(0);
    expect(
      jsonLines(result.stdout)
        .map((line) => line.kind)
        .slice(-2),
    ).toEqual(['task.completed', undefined]);
    expect(result.stderr).not.toContain('online score');
    const tailed = await troupe(['tail', '--task', 'off-1', '--server', nats.url], env);
    expect(tailed.code).toBe(0);
    expect(tailed.stdout).not.toContain('eval.scored');
    expect(tailed.stderr).not.toContain('online score');
  });

  it('troupe run scores its task the same way, showing eval.scored before the result', async () => {
    const result = await troupe(
      ['run', join(dir, 'online.yaml'), 'say when done', '--json', '--home', join(dir, 'run-home')],
      cliEnv(),
      90_000,
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = jsonLines(result.stdout) as { kind?: string; data?: { scores?: { scorer: string }[] } }[];
    expect(lines.map((line) => line.kind).slice(-3)).toEqual(['task.completed', 'eval.scored', undefined]);
    expect(lines.at(-2)?.data?.scores?.map((score) => score.scorer)).toEqual([
      'says done',
      'digits only',
      'broken',
    ]);
  });

  it('troupe submit --wait waits for the online score no longer than what --timeout leaves, and prints the result', async () => {
    const started = Date.now();
    const args = ['submit', 'stuckscored', 'say when done', '--id', 'stuck-1', '--wait', '--json'];
    const result = await troupe([...args, '--timeout', '12', '--server', nats.url], env, 90_000);
    expect(result.code, result.stderr).toBe(0);
    // The score is due up to 40 s after the end: the wait is what is left of the 12 s.
    const waited = Number(
      /waiting up to (\d+) s for task stuck-1's online score \(eval\.scored; what --timeout leaves\)/.exec(
        result.stderr,
      )?.[1],
    );
    expect(waited, result.stderr).toBeLessThanOrEqual(12);
    expect(result.stderr).toContain(`no online score for task stuck-1 within ${waited} s; it may come later`);
    expect(Date.now() - started).toBeLessThan(35_000);
    const kinds = jsonLines(result.stdout).map((line) => line.kind);
    expect(kinds.slice(-2)).toEqual(['task.completed', undefined]);
  });

  it('troupe submit --wait stops waiting for the online score at a Ctrl-C, prints the result and exits as the task ended', async () => {
    const args = ['submit', 'stuckscored', 'say when done', '--id', 'stuck-2', '--wait', '--json'];
    const submit = startTroupe([...args, '--server', nats.url], env);
    try {
      await submit.waitFor(/waiting up to 40 s for task stuck-2's online score \(eval\.scored\)/, 60_000);
      expect(await submit.stop('SIGINT')).toBe(0);
      const kinds = jsonLines(submit.output()).map((line) => line.kind);
      expect(kinds.slice(-2)).toEqual(['task.completed', undefined]);
      expect(submit.output()).not.toContain('no online score');
    } finally {
      await submit.stop();
    }
  });

  it('refuses a bad evals block as the file loads, naming the scorer and the field', async () => {
    const bad = join(dir, 'bad.yaml');
    await writeFile(
      bad,
      pipeline(`
evals:
  scorers:
    - { type: contains, value: done, treshold: 1 }
    - { type: regex, pattern: '(unclosed' }
`),
    );
    const result = await troupe(['validate', bad], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      'evals.scorers[0].treshold: unknown key "treshold" (did you mean "threshold"?)',
    );
    const fixed = join(dir, 'bad2.yaml');
    await writeFile(fixed, pipeline(`\nevals:\n  scorers:\n    - { type: regex, pattern: '(unclosed' }\n`));
    const refused = await troupe(['up', fixed, '--home', join(dir, 'home2'), '--server', nats.url], env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/evals\.scorers\[0\]: scorer 1 \(regex \/\(unclosed\/\): /);
  });
});

describe('online scoring of a task resumed on another coordinator', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('onlineResumed.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('scores the whole run, its events from before the restart included, read back from EVENTS', async () => {
    publishTask(h, 'online-resumed', { id: 'resumed-1', goal: 'write a note, then wait' });
    // The note is written before the stop: its tool call is an event only the first coordinator published.
    await found(
      () => ofKind(h.eventsOf('resumed-1'), 'step.started').find((e) => e.data.step === 'wait'),
      'the slow step',
    );
    expect(ofKind(h.eventsOf('resumed-1'), 'tool.call').map((e) => e.data.tool)).toEqual(['write_file']);
    await h.coordinator.stop();
    const next = await startSecondCoordinator(h, ['onlineResumed.yaml']);
    try {
      const scored = await found(
        () => ofKind(h.eventsOf('resumed-1'), 'eval.scored')[0],
        'the online score',
        40_000,
      );
      expect(ofKind(h.eventsOf('resumed-1'), 'task.resumed')).not.toHaveLength(0);
      expect(scored.data.status).toBe('completed');
      expect(scored.data.scores.map((s) => [s.scorer, s.value, s.pass])).toEqual([
        ['wrote the note', 1, true],
        ['says done', 1, true],
      ]);
      expect(scored.data.pass).toBe(true);
    } finally {
      await next.stop();
    }
  });
});

describe('online scoring of a task that ran on an older version of its pipeline', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('onlineResumed.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("scores it by the evals: block of the version it ran on, read from the stored versions, not the ending coordinator's file", async () => {
    publishTask(h, 'online-resumed', { id: 'older-1', goal: 'write a note, then wait' });
    await found(
      () => ofKind(h.eventsOf('older-1'), 'step.started').find((e) => e.data.step === 'wait'),
      'the slow step',
    );
    await h.coordinator.stop();
    // The file has changed since: its evals: block has one scorer, which the task's version does not have.
    const next = await startSecondCoordinator(h, ['onlineResumedV2.yaml']);
    try {
      const scored = await found(
        () => ofKind(h.eventsOf('older-1'), 'eval.scored')[0],
        'the online score',
        40_000,
      );
      expect(scored.data.scores.map((s) => [s.scorer, s.pass])).toEqual([
        ['wrote the note', true],
        ['says done', true],
      ]);
    } finally {
      await next.stop();
    }
  });
});
