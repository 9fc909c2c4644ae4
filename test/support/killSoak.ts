import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, JournalEntry, STREAMS, subjects } from '@troupe/protocol';
import { startTestNats } from '@troupe/testkit';
import { KillLoop } from './killLoop.ts';

/** The soak's pipeline (test/fixtures/soak.yaml): its name, its steps in order, and the output a task ends with. */
const PIPELINE = 'soak';
const STEPS = ['draft', 'build', 'check'] as const;
const OUTPUT = 'checked';

export interface SoakOptions {
  /** The repository: the built CLI is `apps/cli/bin/troupe.mjs` in it. */
  root: string;
  /** test/fixtures/soak.yaml. */
  pipelineFile: string;
  tasks: number;
  /** The tasks are submitted evenly over this long. */
  submitMs: number;
  /** A kill -9 of a coordinator or worker this often, from the first submission on. */
  killEveryMs: number;
  /** The kills stop once every task has ended, or this long after the last submission, whichever is first. */
  killAfterSubmitMs: number;
  /**
   * ...but not before this many kills (a busy machine's timers fire late, so the kills a span holds vary): the short
   * run's assurance that it was killed as often as it says, at most 60 s more.
   */
  minKills?: number;
  /**
   * After the kills, a task is taken for stuck once no task has ended for this long (the run still ending tasks
   * is slow, not stuck), or once this long has passed since the last submission.
   */
  stallMs: number;
  drainMs: number;
  /**
   * `troupe up --max-deliver`: deliveries in a row without a step completed before a task is dead-lettered. The
   * product's default (10) is meant for a task that crashes its coordinator; a kill every second on a busy machine
   * reaches it too (no step completes while every process is starting), so the soak raises it to tell lost tasks
   * from tasks given up on by design.
   */
  maxDeliver?: number;
  seed: number;
  random: () => number;
  log: (line: string) => void;
  /** Keep the logs and the home when nothing failed too. */
  keep?: boolean;
}

/** What a step's one tool call did: how often its side effect ran, and what the journal recorded for it. */
interface CallCount {
  taskId: string;
  step: string;
  /** The journal keys of the step's tool calls (one expected: `<taskId>.<step>.1.0.0`). */
  keys: string[];
  /** How many lines the step appended to the task's ledger: one per run of its tool call. */
  runs: number;
  /** The journal's record of the call: a result, and whether it was in doubt. */
  recorded: 'ok' | 'in_doubt' | 'failed' | 'claimed' | 'missing';
}

export interface SoakReport {
  seed: number;
  tasks: number;
  /** Tasks with exactly one final event, `task.completed` with the right output. */
  completed: number;
  kills: number;
  killsDuringStartUp: number;
  /** How long the kills went on, from the first submission; how many tasks had ended by then. */
  killMs: number;
  endedDuringKills: number;
  restarts: number;
  unexpectedExits: number;
  /** Final events published more than once under the same id (de-duplicated by EVENTS): allowed, reported. */
  finalRepublished: number;
  /** Tool calls whose journal records them in doubt (a run died between claim and result): ran once, or never. */
  inDoubtRan: number;
  inDoubtNotRun: number;
  wallMs: number;
  /** From the first submission to the last task's end. */
  runMs: number;
  tasksPerSecond: number;
  failures: string[];
  /** The processes' output and the tasks' workspaces, kept when something failed (or when asked). */
  kept?: string;
}

const taskIds = (n: number) => Array.from({ length: n }, (_, i) => `soak-${String(i + 1).padStart(5, '0')}`);

/**
 * 2 `troupe up` (each with agents) and 2 `troupe worker` on one nats-server, `tasks` tasks of the soak pipeline
 * submitted over `submitMs`, and a kill -9 of one of the four every `killEveryMs` (each restarted at once). Then it
 * checks: every task ended exactly once, completed with the right output; no step's side effect ran twice, each run
 * matching a claim in the journal; no task left unfinished once the run stops ending tasks (`stallMs`) or by
 * `drainMs` after the last submission.
 */
export async function runKillSoak(o: SoakOptions): Promise<SoakReport> {
  const wallStart = Date.now();
  const failures: string[] = [];
  const fail = (line: string) => {
    failures.push(line);
  };
  const nats = await startTestNats();
  const home = await mkdtemp(join(tmpdir(), 'troupe-soak-'));
  const logDir = join(home, 'logs');
  await mkdir(logDir);
  const env = cliEnv();
  const common = ['--server', nats.url, '--home', home];
  const up = [
    'up',
    o.pipelineFile,
    ...common,
    // A dead coordinator's tasks go to the other soon, and a dead worker's step to another host soon: the kills
    // come every second, and the defaults (30 s, 5 s) would leave the run waiting on them most of the time.
    '--ack-wait',
    '2',
    '--step-heartbeat',
    '1',
    ...(o.maxDeliver === undefined ? [] : ['--max-deliver', String(o.maxDeliver)]),
  ];
  const loop = new KillLoop({
    cli: join(o.root, 'apps', 'cli', 'bin', 'troupe.mjs'),
    env,
    cwd: home,
    logDir,
    random: o.random,
    slots: [
      { name: 'coordinator-1', args: up, ready: /troupe is up/ },
      { name: 'coordinator-2', args: up, ready: /troupe is up/ },
      { name: 'worker-1', args: ['worker', o.pipelineFile, ...common], ready: /troupe worker on .* serving/ },
      { name: 'worker-2', args: ['worker', o.pipelineFile, ...common], ready: /troupe worker on .* serving/ },
    ],
  });
  const client = await connect({ servers: nats.url, name: 'kill-soak' });
  const ids = taskIds(o.tasks);
  /** Every final event published live, by task: its id, kind and output. */
  const finals = new Map<string, { id: string; kind: string; output?: string; error?: string }[]>();
  let lastEnd = 0;
  let runStart = 0;
  let runMs = 0;
  let finalRepublished = 0;
  let endedDuringKills = 0;
  let killMs = 0;
  try {
    await loop.start();
    client.subscribe(`troupe.events.${PIPELINE}.*.task.>`, {
      callback: (_error, msg) => {
        const kind = msg.subject.split('.').slice(4).join('.');
        if (!(FINAL_EVENT_KINDS as readonly string[]).includes(kind)) return;
        const event = msg.json<{
          id: string;
          taskId: string;
          data: { output?: string; reason?: string; message?: string };
        }>();
        const list = finals.get(event.taskId) ?? [];
        list.push({
          id: event.id,
          kind,
          ...(event.data.output === undefined ? {} : { output: event.data.output }),
          ...(event.data.reason === undefined
            ? {}
            : { error: `${event.data.reason}: ${event.data.message}` }),
        });
        finals.set(event.taskId, list);
        lastEnd = Date.now();
      },
    });
    await client.flush();
    const ended = () => ids.filter((id) => finals.has(id)).length;

    const js = jetstream(client);
    runStart = Date.now();
    loop.killEvery(o.killEveryMs);
    const every = o.submitMs / o.tasks;
    let lastProgress = runStart;
    for (const [i, id] of ids.entries()) {
      const due = runStart + i * every;
      if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
      await js.publish(subjects.task(PIPELINE), JSON.stringify({ id, goal: `soak task ${i + 1}` }), {
        msgID: id,
        retries: 20,
      });
      if (Date.now() - lastProgress >= 5_000) {
        lastProgress = Date.now();
        o.log(
          `  ${((Date.now() - runStart) / 1000).toFixed(0)} s: ${i + 1} submitted, ${ended()} ended, ${loop.kills.length} kills`,
        );
      }
    }
    const submitted = Date.now();
    o.log(
      `  all ${o.tasks} submitted after ${((submitted - runStart) / 1000).toFixed(1)} s; ${ended()} ended`,
    );

    /** Waits for `done`, until `deadline`, or until no task has ended for `stall` (counted from `since` at least). */
    const until = async (
      done: () => boolean,
      deadline: number,
      stall = Number.POSITIVE_INFINITY,
      since = 0,
    ) => {
      while (!done() && Date.now() < deadline && Date.now() - Math.max(lastEnd, since) < stall) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        if (Date.now() - lastProgress >= 5_000) {
          lastProgress = Date.now();
          o.log(
            `  ${((Date.now() - runStart) / 1000).toFixed(0)} s: ${ended()} of ${o.tasks} ended, ${loop.kills.length} kills`,
          );
        }
      }
    };
    await until(() => ended() === o.tasks, submitted + o.killAfterSubmitMs);
    const minKills = o.minKills ?? 0;
    const killsDeadline = Date.now() + 60_000;
    while (loop.kills.length < minKills && Date.now() < killsDeadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    loop.stopKilling();
    endedDuringKills = ended();
    killMs = Date.now() - runStart;
    if (ended() < o.tasks) {
      o.log(
        `  kills stopped with ${o.tasks - ended()} tasks still running; waiting for them with all processes up`,
      );
      await loop.allReady(60_000).catch((error: Error) => fail(`after the kills: ${error.message}`));
      await until(() => ended() === o.tasks, submitted + o.drainMs, o.stallMs, Date.now());
    }
    runMs = (ended() === o.tasks ? lastEnd : Date.now()) - runStart;
    await loop.stopAll();

    // 1. Every task ended once, completed, with the right output: live, and as EVENTS stores it.
    const stored = await storedFinals(client);
    const records = await new Kvm(client).open(BUCKETS.workflows);
    for (const id of ids) {
      const live = finals.get(id) ?? [];
      const distinct = [...new Map(live.map((f) => [f.id, f])).values()];
      finalRepublished += live.length - distinct.length;
      const kept = stored.get(id) ?? [];
      if (distinct.length === 0) fail(`${id}: no final event (lost or stuck)`);
      else if (distinct.length > 1)
        fail(`${id}: ended ${distinct.length} times: ${JSON.stringify(distinct)}`);
      else {
        const [end] = distinct;
        if (end?.kind !== 'task.completed' || end.output !== OUTPUT)
          fail(`${id}: ended ${end?.kind} with ${end?.output ?? end?.error}, not task.completed "${OUTPUT}"`);
      }
      if (distinct.length > 0 && kept.length !== 1)
        fail(`${id}: EVENTS holds ${kept.length} final events (${kept.join(', ')}), not one`);
      const status = (await records.get(id))?.json<{ status?: string }>()?.status;
      if (distinct.length > 0 && status !== 'completed') fail(`${id}: its workflow record says ${status}`);
    }

    // 2. No side effect ran twice: each step's ledger line against the journal's claim of its tool call.
    const calls = await callCounts(client, home, ids);
    let inDoubtRan = 0;
    let inDoubtNotRun = 0;
    for (const c of calls) {
      const where = `${c.taskId} step ${c.step}`;
      if (c.keys.length !== 1 && finals.has(c.taskId))
        fail(`${where}: ${c.keys.length} tool-call keys in the journal (${c.keys.join(', ')}), not one`);
      if (c.runs > 1) fail(`${where}: its side effect ran ${c.runs} times (journal: ${c.recorded})`);
      if (c.runs > 0 && c.keys.length === 0)
        fail(`${where}: its side effect ran with no claim in the journal`);
      if (c.recorded === 'ok' && c.runs === 0)
        fail(`${where}: the journal records a result but it never ran`);
      if (c.recorded === 'failed' || c.recorded === 'claimed')
        fail(`${where}: the journal holds a ${c.recorded} record for its call (runs: ${c.runs})`);
      if (c.recorded === 'in_doubt') {
        if (c.runs === 1) inDoubtRan += 1;
        else inDoubtNotRun += 1;
      }
    }

    for (const exit of loop.unexpectedExits)
      fail(
        `${exit.slot} (pid ${exit.pid}) exited by itself at ${exit.atMs} ms: code ${exit.code}, signal ${exit.signal}`,
      );

    const completed = ids.filter((id) => {
      const distinct = new Set((finals.get(id) ?? []).map((f) => f.id));
      const end = finals.get(id)?.[0];
      return distinct.size === 1 && end?.kind === 'task.completed' && end.output === OUTPUT;
    }).length;
    return {
      seed: o.seed,
      tasks: o.tasks,
      completed,
      kills: loop.kills.length,
      killsDuringStartUp: loop.kills.filter((k) => !k.wasReady).length,
      killMs,
      endedDuringKills,
      restarts: loop.restarts(),
      unexpectedExits: loop.unexpectedExits.length,
      finalRepublished,
      inDoubtRan,
      inDoubtNotRun,
      wallMs: Date.now() - wallStart,
      runMs,
      tasksPerSecond: completed / (runMs / 1000),
      failures,
      ...(failures.length > 0 || o.keep ? { kept: home } : {}),
    };
  } finally {
    await loop.stopAll();
    await client.close().catch(() => {});
    await nats.stop();
    if (failures.length === 0 && !o.keep) await rm(home, { recursive: true, force: true });
  }
}

/** The environment of the CLI children: this one's, minus any way to reach another NATS server. */
function cliEnv(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([key]) => !key.startsWith('NATS_') && !key.startsWith('TROUPE_')),
  );
  return { ...env, TROUPE_LOG_LEVEL: 'warn' };
}

/** The final events EVENTS holds for the soak's tasks, by task: their kinds. */
async function storedFinals(client: Awaited<ReturnType<typeof connect>>): Promise<Map<string, string[]>> {
  const js = jetstream(client);
  const consumer = await js.consumers.get(STREAMS.events, {
    // One subject (nats-server 2.9 takes no list): every task.* event, the final kinds picked out below.
    filter_subjects: `troupe.events.${PIPELINE}.*.task.>`,
    deliver_policy: DeliverPolicy.All,
  });
  const byTask = new Map<string, string[]>();
  for (;;) {
    let got = 0;
    for await (const msg of await consumer.fetch({ max_messages: 1_000, expires: 2_000 })) {
      got += 1;
      const kind = msg.subject.split('.').slice(4).join('.');
      if (!(FINAL_EVENT_KINDS as readonly string[]).includes(kind)) continue;
      const taskId = msg.subject.split('.')[3] ?? '';
      byTask.set(taskId, [...(byTask.get(taskId) ?? []), kind]);
    }
    if (got === 0) return byTask;
  }
}

/**
 * For each task and step: the journal keys of the step's tool calls, what is recorded under them, and how many
 * times the step's line is in the task's ledger.
 */
async function callCounts(
  client: Awaited<ReturnType<typeof connect>>,
  home: string,
  ids: readonly string[],
): Promise<CallCount[]> {
  const journal = await new Kvm(client).open(BUCKETS.journal);
  // Tool-call keys: `<pipeline>.<taskId>.<step>.<round>.<turn>.<index>`.
  const toolKeys = new Map<string, string[]>();
  for await (const key of await journal.keys(`${PIPELINE}.>`)) {
    const parts = key.split('.');
    if (parts.length !== 6 || !/^\d+$/.test(parts[4] ?? '') || !/^\d+$/.test(parts[5] ?? '')) continue;
    const at = `${parts[1]}/${parts[2]}`;
    toolKeys.set(at, [...(toolKeys.get(at) ?? []), key]);
  }
  const counts: CallCount[] = [];
  for (const taskId of ids) {
    const ledgerFile = join(home, 'workspaces', PIPELINE, taskId, 'ledger.txt');
    const lines = existsSync(ledgerFile) ? readFileSync(ledgerFile, 'utf8').split('\n').filter(Boolean) : [];
    for (const step of STEPS) {
      const keys = toolKeys.get(`${taskId}/${step}`) ?? [];
      let recorded: CallCount['recorded'] = 'missing';
      for (const key of keys) {
        const entry = await journal.get(key);
        const parsed = entry ? JournalEntry.safeParse(entry.json()) : undefined;
        const record = parsed?.success ? parsed.data : undefined;
        if (record?.kind === 'tool.started') recorded = 'claimed';
        else if (record?.kind === 'tool.result')
          recorded = record.result.ok
            ? 'ok'
            : record.result.error?.code === 'in_doubt'
              ? 'in_doubt'
              : 'failed';
      }
      counts.push({ taskId, step, keys, runs: lines.filter((line) => line === step).length, recorded });
    }
  }
  return counts;
}
