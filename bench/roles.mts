/**
 * What least privilege costs (issue 28): the demo's tasks run with every part on a NATS user of its own — a
 * coordinator (`troupe up --no-agents`), a `troupe worker` per agent, a submitter — under the `authorization` block
 * Troupe wrote before (every role in one account) and the `accounts` block it writes now (an account per role,
 * importing from TROUPE). For each: messages through the server per task (its /varz `in_msgs` + `out_msgs`, from
 * the first task submitted to the last one ended) and task latency (the final events' `durationMs`). The
 * steps' events go in batches by default (`TROUPE_EVENT_BATCH=0`, read by every process's bus, sends each
 * alone), read here through `eventsOf`.
 *
 *   npm run build && npx tsx bench/roles.mts [tasks=40]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { connect, type Msg, type NatsConnection, nkeyAuthenticator, nkeys } from '@nats-io/transport-node';
import { accountsBlock, authorizationBlock, type ConfiguredUser, type Role } from '@troupe/coordinator';
import { eventsOf, FINAL_EVENT_KINDS, subjects } from '@troupe/protocol';
import { startTestNats } from '@troupe/testkit';

const tasks = Number(process.argv[2] ?? 40);
const root = join(import.meta.dirname, '..');
const cli = join(root, 'apps', 'cli', 'bin', 'troupe.mjs');
const demo = join(root, 'examples', 'demo.yaml');

const ROLES: Role[] = [
  { kind: 'coordinator', name: 'core' },
  { kind: 'worker', name: 'planner', pipeline: 'demo', agents: ['planner'] },
  { kind: 'worker', name: 'executor', pipeline: 'demo', agents: ['executor'] },
  { kind: 'worker', name: 'reviewer', pipeline: 'demo', agents: ['reviewer'] },
  { kind: 'submitter', name: 'ci', pipelines: ['demo'] },
];

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });

/** Starts `troupe <args>` and resolves once its output matches `ready`. */
function start(args: string[], env: NodeJS.ProcessEnv, ready: RegExp): Promise<ChildProcess> {
  const child = spawn(process.execPath, [cli, ...args], { env: { ...env, TROUPE_LOG_LEVEL: 'info' } });
  return new Promise((resolve, reject) => {
    let seen = '';
    const look = (chunk: Buffer) => {
      seen += chunk.toString();
      if (ready.test(seen)) resolve(child);
    };
    child.stdout?.on('data', look);
    child.stderr?.on('data', look);
    child.on('exit', (code) => reject(new Error(`troupe ${args[0]} exited (${code}):\n${seen}`)));
  });
}

async function run(block: 'authorization' | 'accounts') {
  const seeds = new Map(ROLES.map((role) => [role.name, nkeys.createUser()]));
  const users: ConfiguredUser[] = ROLES.map((role) => ({
    role,
    nkey: seeds.get(role.name)?.getPublicKey() as string,
  }));
  const monitor = await freePort();
  const config = `${(block === 'accounts' ? accountsBlock : authorizationBlock)(users, 1, ['demo'])}\nhttp: "127.0.0.1:${monitor}"\n`;
  const nats = await startTestNats({ config });
  const home = await mkdtemp(join(tmpdir(), 'troupe-bench-roles-'));
  const children: ChildProcess[] = [];
  for (const [name, seed] of seeds) {
    await writeFile(join(home, `${name}.nk`), new TextDecoder().decode(seed.getSeed()), { mode: 0o600 });
  }
  const as = (name: string): NodeJS.ProcessEnv => ({
    ...process.env,
    NATS_URL: nats.url,
    NATS_NKEY: join(home, `${name}.nk`),
    TROUPE_INBOX: `troupe._inbox.${name}`,
  });
  const connectAs = (name: string): Promise<NatsConnection> =>
    connect({
      servers: nats.url,
      authenticator: nkeyAuthenticator(seeds.get(name)?.getSeed() as Uint8Array),
      inboxPrefix: `troupe._inbox.${name}`,
    });
  const varz = async () =>
    (await (await fetch(`http://127.0.0.1:${monitor}/varz`)).json()) as { in_msgs: number; out_msgs: number };
  try {
    children.push(await start(['up', demo, '--no-agents', '--home', home], as('core'), /troupe is up/));
    for (const agent of ['planner', 'executor', 'reviewer']) {
      children.push(
        await start(['worker', demo, '--agents', agent, '--home', home], as(agent), /serving|worker is up/i),
      );
    }
    const watcher = await connectAs('core');
    const durations: number[] = [];
    let allEnded = () => {};
    const ended = new Promise<void>((resolve) => (allEnded = resolve));
    let steps = 0;
    /** Messages this watcher took: among the server's `out_msgs`, more of them with batching on (every batch). */
    let watched = 0;
    // A task's end comes alone; its steps' completions alone or, with batching on, inside a batch of its events.
    const callback = (_: unknown, msg: Msg) => {
      watched += 1;
      const parsed = eventsOf(msg.data, msg.subject);
      if (!parsed.ok) throw new Error(`unreadable events on ${msg.subject}: ${parsed.reason}`);
      for (const event of parsed.value) {
        if (event.kind === 'step.completed') steps += 1;
        if (!FINAL_EVENT_KINDS.includes(event.kind)) continue;
        if (event.kind !== 'task.completed') throw new Error(`a task did not complete: ${msg.string()}`);
        durations.push(event.data.durationMs);
        if (durations.length === tasks) allEnded();
      }
    };
    for (const kind of ['task.*', 'step.completed', 'batch']) {
      watcher.subscribe(subjects.event('demo', '*', kind), { callback });
    }
    await watcher.flush();
    const submitter = await connectAs('ci');
    const js = jetstream(submitter);
    // One task first, unmeasured: every process has opened its buckets and warmed up.
    await js.publish(
      'troupe.tasks.demo',
      JSON.stringify({ id: `warm-${block}`, goal: 'Write a hello note' }),
    );
    const before = await varz();
    const stepsBefore = steps;
    const watchedBefore = watched;
    const started = performance.now();
    for (let i = 0; i < tasks; i += 1) {
      await js.publish(
        'troupe.tasks.demo',
        JSON.stringify({ id: `t-${block}-${i}`, goal: 'Write a hello note' }),
      );
    }
    await ended;
    const seconds = (performance.now() - started) / 1000;
    const after = await varz();
    const watchedAfter = watched;
    // The warm-up task's events may fall inside the window: at most one task's worth, in both blocks alike.
    const sorted = durations.slice(-tasks).sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    console.log(
      JSON.stringify({
        block,
        tasks,
        messagesPerTask: Math.round(
          (after.in_msgs - before.in_msgs + after.out_msgs - before.out_msgs) / tasks,
        ),
        inPerTask: Math.round((after.in_msgs - before.in_msgs) / tasks),
        outPerTask: Math.round((after.out_msgs - before.out_msgs) / tasks),
        watcherPerTask: Number(((watchedAfter - watchedBefore) / tasks).toFixed(1)),
        stepsPerTask: Number(((steps - stepsBefore) / tasks).toFixed(1)),
        p50Ms: at(0.5),
        p95Ms: at(0.95),
        tasksPerSecond: Number((tasks / seconds).toFixed(2)),
      }),
    );
    await submitter.close();
    await watcher.close();
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(children.map((child) => new Promise((resolve) => child.once('exit', resolve))));
    await nats.stop();
    await rm(home, { recursive: true, force: true });
  }
}

// Each block twice, in turn, so that neither gains from running second on a warmer machine.
for (const block of ['authorization', 'accounts', 'authorization', 'accounts'] as const) await run(block);
const note = (await readFile(demo, 'utf8')).includes('scripted') ? 'offline, scripted models' : '';
console.log(JSON.stringify({ note }));
