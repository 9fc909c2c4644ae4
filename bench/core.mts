/**
 * The core benchmark: the fixed peer workload (bench/fixtures/core.yaml: planner answers; executor makes one real
 * tool call, then answers; reviewer approves) in the production configuration — checkpoints, step journal and
 * events on — against a nats-server it starts, with every task's result checked. Raw NATS request/reply is
 * measured in the same run, as the floor. One JSON line per figure.
 *
 * Per hop: 2,000 steps, one at a time, sent the way the workflow sends them to an agent host whose agent answers at
 * once; the figure is their p50 and p99 less raw request/reply's.
 *
 * The coordinator works on 64 tasks at once (TROUPE_BENCH_CONCURRENCY); TROUPE_BENCH_LOG=warn shows its log.
 * With OTEL_EXPORTER_OTLP_ENDPOINT set, it exports traces as `troupe up` does (`bench/otlpSink.mts` is a collector
 * that takes and drops them), to measure what tracing costs.
 *
 * Then the parked phase (bench/fixtures/parked.yaml): tasks whose model answers after 20 s (10 ms more per task
 * beyond 2,000, so that none ends before all are in flight; TROUPE_BENCH_PARKED_DELAY_MS sets it on a busy machine), all submitted at once to a coordinator of their own
 * with the default 16 working slots; a waiting task is parked and holds none. It reports how soon all were in
 * flight at once, the heap and the RSS (this process: coordinator, agents and client; nats-server is another) per
 * task in flight, and the heap once all have ended against the heap before (run with --expose-gc, as `npm run
 * bench` does, for exact heap figures).
 *
 * Last the scale phase (bench/fixtures/scale.yaml): the same workload with its agents served by `troupe worker`
 * processes (the built CLI: `node scripts/buildCli.mjs`, or TROUPE_BENCH_CLI naming another checkout's
 * apps/cli/bin/troupe.mjs) and workflows only in this process (`troupe up --no-agents`). With the first worker,
 * 200 tasks one at a time (sequential p50/p99 with the agents in another process), then for each worker count a
 * batch of `scale` tasks at once, tasks/s.
 *
 *   npm run bench -- [sequential=200] [concurrent=1000,10000] [parked=2000] [scale=1000] [workers=1,2,4]
 *
 * Each count may be 0 to skip that phase; `concurrent` and `workers` take comma-separated lists.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { connect, type Msg } from '@nats-io/transport-node';
import { builtinTools, createStepRunner, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { FINAL_EVENT_KINDS, parseMessage, subjects, TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus, startAgentHost, startTracing, systemClock } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';

const sequential = Number(process.argv[2] ?? 200);
const concurrentBatches = (process.argv[3] ?? '1000,10000').split(',').map(Number);
const parked = Number(process.argv[4] ?? 2_000);
const scaleTasks = Number(process.argv[5] ?? 1_000);
const workerCounts = (process.argv[6] ?? '1,2,4').split(',').map(Number);
/** The heap in use, after a full collection when the process was started with --expose-gc. */
const heapUsed = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};
/** The process's resident set, after a full collection when the process was started with --expose-gc. */
const rss = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().rss;
};

const print = (figure: string, value: number, unit: string, extra: Record<string, unknown> = {}) =>
  console.log(
    JSON.stringify({ bench: 'core', figure, value: Math.round(value * 1000) / 1000, unit, ...extra }),
  );
const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;

const nats = await startTestNats();
const logger = createLogger({ level: process.env.TROUPE_BENCH_LOG ?? 'silent' });
const tracing = await startTracing({ service: 'troupe-bench', logger });
if (tracing) print('traces exported over OTLP/HTTP', 1, 'on');
const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-bench-core-'));
const client = await connect({ servers: nats.url, name: 'bench-client' });

// The floor: raw request/reply on the same server, one at a time.
client.subscribe('bench.echo', { callback: (_e, msg) => msg.respond(msg.data) });
await client.flush();
const raw: number[] = [];
for (let i = 0; i < 2_000; i++) {
  const started = performance.now();
  await client.request('bench.echo', 'ping', { timeout: 5_000 });
  raw.push(performance.now() - started);
}
raw.sort((a, b) => a - b);
print('raw NATS request/reply p50', percentile(raw, 0.5), 'ms');
print('raw NATS request/reply p99', percentile(raw, 0.99), 'ms');

// TROUPE_BENCH_LOCAL_STEPS sets the coordinator's maxLocalSteps (steps run in-process, no NATS hop) where its
// default is not wanted; TROUPE_EVENT_BATCH=0 (read by the bus) sends each event alone, not in batches (the
// default).
const localSteps = process.env.TROUPE_BENCH_LOCAL_STEPS
  ? { maxLocalSteps: Number(process.env.TROUPE_BENCH_LOCAL_STEPS) }
  : {};
const bus = await NatsBus.connect({ servers: nats.url, name: 'bench-coordinator', logger });
const registry = builtinTools();
const pipeline = await loadPipeline(join(import.meta.dirname, 'fixtures', 'core.yaml'), {
  toolNames: registry.names(),
});
const coordinator = await startCoordinator({
  bus,
  pipelines: [pipeline],
  logger,
  workspaceRoot,
  registry,
  // Working slots per pipeline: enough to keep both cores busy. Far more (every task of a 10,000 burst at once)
  // only queues work on the event loop and the server: TROUPE_BENCH_CONCURRENCY to try.
  concurrency: Number(process.env.TROUPE_BENCH_CONCURRENCY ?? 64),
  ...localSteps,
});

// Per hop: a step as the workflow sends it (heartbeats on), to an agent host whose agent answers at once (no
// journal, no tool), one at a time, against raw request/reply above.
const hopHost = startAgentHost({
  bus,
  pipeline: 'hop',
  agents: [
    {
      name: 'echo',
      instructions: 'Answer.',
      model: {
        provider: 'inline',
        model: 'echo',
        complete: async () => ({
          content: 'ok',
          toolCalls: [],
          usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
          finishReason: 'stop',
          model: 'echo',
        }),
      },
      tools: [],
      rules: [],
      maxTurns: 1,
    },
  ],
  registry,
  workspaceRoot,
  logger,
});
const runHop = createStepRunner({ bus, clock: systemClock });
const hops: number[] = [];
for (let i = 0; i < 2_200; i++) {
  const stepId = `hop-${i}.echo.1`;
  const started = performance.now();
  const reply = await runHop(
    {
      request: {
        stepId,
        taskId: `hop-${i}`,
        pipeline: 'hop',
        agent: 'echo',
        step: 'echo',
        round: 1,
        goal: 'answer',
        context: [],
        expect: 'text',
        priorModelCalls: 0,
      },
      timeoutMs: 10_000,
    },
    new AbortController().signal,
  );
  if (!reply.ok) throw new Error(`hop ${stepId} failed: ${reply.error.message}`);
  if (i >= 200) hops.push(performance.now() - started);
}
await hopHost.stop();
hops.sort((a, b) => a - b);
print('per-hop overhead over raw request/reply p50', percentile(hops, 0.5) - percentile(raw, 0.5), 'ms', {
  hopP50: Math.round(percentile(hops, 0.5) * 1000) / 1000,
});
print('per-hop overhead over raw request/reply p99', percentile(hops, 0.99) - percentile(raw, 0.99), 'ms', {
  hopP99: Math.round(percentile(hops, 0.99) * 1000) / 1000,
});

const ended = new Map<string, { at: number; ok: boolean }>();
const waiting = new Map<string, () => void>();
// A final event is never batched, and its subject ends with its kind: only those are read (and checked whole), as a
// client waiting for results would, so this process's CPU per task is Troupe's, not the client's check of every event.
const isFinal = (subject: string) => FINAL_EVENT_KINDS.some((kind) => subject.endsWith(`.${kind}`));
client.subscribe(subjects.allTaskEvents, {
  callback: (_e, msg) => {
    if (!isFinal(msg.subject)) return;
    const parsed = parseMessage(TroupeEvent, msg.data);
    if (!parsed.ok || !FINAL_EVENT_KINDS.includes(parsed.value.kind)) return;
    const event = parsed.value;
    const ok = event.taskId.startsWith('parked-')
      ? event.kind === 'task.completed' && event.data.output === 'Thought it over.'
      : event.kind === 'task.completed' &&
        event.data.approved === true &&
        event.data.output === 'Wrote out.txt.';
    ended.set(event.taskId, { at: performance.now(), ok });
    waiting.get(event.taskId)?.();
  },
});
await client.flush();

const submit = (id: string, pipeline = 'core') =>
  client.publish(subjects.task(pipeline), JSON.stringify({ id, goal: 'write out.txt' }));
const endOf = (id: string) =>
  new Promise<void>((resolve) => {
    if (ended.has(id)) resolve();
    else waiting.set(id, resolve);
  });
/** Submits `count` tasks named `<prefix>-<n>` at once and waits for all to end; how many seconds that took. */
async function batch(prefix: string, count: number, pipeline = 'core'): Promise<number> {
  const ids = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
  const started = performance.now();
  for (const id of ids) submit(id, pipeline);
  await client.flush();
  await Promise.all(ids.map(endOf));
  return (performance.now() - started) / 1000;
}

/** Submits one task and waits for its end; how many milliseconds that took. */
async function oneTask(id: string, pipeline = 'core'): Promise<number> {
  const started = performance.now();
  submit(id, pipeline);
  await endOf(id);
  return performance.now() - started;
}

// Warm up: code paths compiled, streams and consumers in place.
for (let i = 0; i < 20; i++) {
  submit(`warm-${i}`);
  await endOf(`warm-${i}`);
}

const latencies: number[] = [];
const sequentialCpu = process.cpuUsage();
const sequentialStart = performance.now();
for (let i = 0; i < sequential; i++) latencies.push(await oneTask(`seq-${i}`));
const sequentialMs = performance.now() - sequentialStart;
const { user, system } = process.cpuUsage(sequentialCpu);
latencies.sort((a, b) => a - b);
if (sequential > 0) printSequential();
function printSequential() {
  print('sequential task p50', percentile(latencies, 0.5), 'ms', { tasks: sequential });
  print('sequential task p99', percentile(latencies, 0.99), 'ms', { tasks: sequential });
  print('sequential tasks per second', sequential / (sequentialMs / 1000), 'tasks/s');
  // Coordinator, agents and this client share the process; nats-server's own CPU is not counted.
  print('sequential CPU per task (this process)', (user + system) / 1000 / sequential, 'ms', {
    user: Math.round((user / 1000 / sequential) * 1000) / 1000,
  });
}

for (const concurrent of concurrentBatches.filter((n) => n > 0)) {
  const seconds = await batch(`conc-${concurrent}`, concurrent);
  print(`${concurrent} concurrent tasks, wall time`, seconds, 's');
  print(`${concurrent} concurrent tasks per second`, concurrent / seconds, 'tasks/s');
}

// Parked: every task waits 20 s on its model; the coordinator keeps its default 16 working slots.
if (parked > 0) await parkedPhase();
async function parkedPhase() {
  const parkedBus = await NatsBus.connect({ servers: nats.url, name: 'bench-parked', logger });
  // The model's wait grows with the count, so that no task ends (and frees its memory) before all are in flight:
  // the fixture, copied with a longer delay.
  const fixtures = join(import.meta.dirname, 'fixtures');
  const delayMs = Number(
    process.env.TROUPE_BENCH_PARKED_DELAY_MS ?? 20_000 + Math.max(0, parked - 2_000) * 10,
  );
  const parkedDir = await mkdtemp(join(tmpdir(), 'troupe-bench-parked-'));
  await writeFile(join(parkedDir, 'parked.yaml'), await readFile(join(fixtures, 'parked.yaml')));
  const script = await readFile(join(fixtures, 'parked.script.yaml'), 'utf8');
  await writeFile(
    join(parkedDir, 'parked.script.yaml'),
    script.replace(/delayMs: \d+/, `delayMs: ${delayMs}`),
  );
  const parkedCoordinator = await startCoordinator({
    bus: parkedBus,
    pipelines: [await loadPipeline(join(parkedDir, 'parked.yaml'), { toolNames: registry.names() })],
    logger,
    workspaceRoot,
    registry,
    maxInFlight: parked,
    ...localSteps,
  });
  const waitingNow = new Set<string>();
  let allWaiting: (() => void) | undefined;
  // step.started alone (TROUPE_EVENT_BATCH=0), or inside a batch of the task's events (the default); read by hand
  // rather than with the protocol's eventsOf, so the bench still builds against a checkout from before batches.
  const started = {
    callback: (_e: unknown, msg: Msg) => {
      const body = msg.json<{
        taskId?: string;
        kind?: string;
        events?: { taskId: string; kind: string }[];
      }>();
      for (const event of body.events ?? [body]) {
        if (event.kind === 'step.started' && event.taskId) waitingNow.add(event.taskId);
      }
      if (waitingNow.size === parked) allWaiting?.();
    },
  };
  client.subscribe(subjects.event('parked', '*', 'step.started'), started);
  client.subscribe(subjects.event('parked', '*', 'batch'), started);
  await client.flush();
  const heapBefore = heapUsed();
  const rssBefore = rss();
  const parkedStart = performance.now();
  const parkedIds = Array.from({ length: parked }, (_, i) => `parked-${i}`);
  for (const id of parkedIds) submit(id, 'parked');
  await client.flush();
  await new Promise<void>((resolve) => {
    allWaiting = resolve;
    if (waitingNow.size === parked) resolve();
  });
  const allInFlightMs = performance.now() - parkedStart;
  const firstEnded = parkedIds.filter((id) => ended.has(id)).length;
  const heapInFlight = heapUsed();
  const rssInFlight = rss();
  print(`${parked} parked tasks: time until all were in flight`, allInFlightMs / 1000, 's', {
    endedMeanwhile: firstEnded,
    modelDelayS: delayMs / 1000,
  });
  print('heap per parked task in flight', (heapInFlight - heapBefore) / parked / 1024, 'KB', {
    tasks: parked,
  });
  // RSS holds the heap's free pages, code and socket buffers as well: the figure a machine's memory is sized by.
  print('RSS per parked task in flight', (rssInFlight - rssBefore) / parked / 1024, 'KB', {
    tasks: parked,
    rssBeforeMiB: Math.round(rssBefore / 1024 / 1024),
  });
  await Promise.all(parkedIds.map(endOf));
  print(`${parked} parked tasks, wall time`, (performance.now() - parkedStart) / 1000, 's');
  // Measured with the coordinator still running: what it keeps of ended tasks is what would leak.
  print(
    'heap after the parked tasks ended, against before',
    ((heapUsed() - heapBefore) / heapBefore) * 100,
    '%',
    {
      beforeMiB: Math.round(heapBefore / 1024 / 1024),
    },
  );
  await parkedCoordinator.stop();
  await parkedBus.close();
  await rm(parkedDir, { recursive: true, force: true });
}

/** One task at a time with the agents in one `troupe worker` (the p50 ≤ 6 ms with a separate worker). */
async function workerSequential() {
  for (let i = 0; i < 20; i++) await oneTask(`scale-warm-${i}`, 'scale');
  const times: number[] = [];
  for (let i = 0; i < 200; i++) times.push(await oneTask(`scale-seq-${i}`, 'scale'));
  times.sort((a, b) => a - b);
  print('scale: sequential task p50 with 1 worker process', percentile(times, 0.5), 'ms', { tasks: 200 });
  print('scale: sequential task p99 with 1 worker process', percentile(times, 0.99), 'ms', { tasks: 200 });
}

// Scale: workflows here, agents in 1, 2, then 4 worker processes.
if (scaleTasks > 0) await scalePhase();
async function scalePhase() {
  const scaleBus = await NatsBus.connect({ servers: nats.url, name: 'bench-scale', logger });
  const scaleFile = join(import.meta.dirname, 'fixtures', 'scale.yaml');
  const scaleCoordinator = await startCoordinator({
    bus: scaleBus,
    pipelines: [await loadPipeline(scaleFile, { toolNames: registry.names() })],
    logger,
    workspaceRoot,
    registry,
    hostAgents: false,
    concurrency: scaleTasks,
  });
  const home = await mkdtemp(join(tmpdir(), 'troupe-bench-workers-'));
  const workers: ChildProcess[] = [];
  const startWorker = () =>
    new Promise<ChildProcess>((resolve, reject) => {
      const cli =
        process.env.TROUPE_BENCH_CLI ?? join(import.meta.dirname, '..', 'apps', 'cli', 'bin', 'troupe.mjs');
      const worker = spawn(
        process.execPath,
        [cli, 'worker', scaleFile, '--server', nats.url, '--home', home, '--json', '--log-level', 'info'],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      createInterface({ input: worker.stdout }).on('line', (line) => {
        if (line.includes('agent host started')) resolve(worker);
      });
      worker.once('exit', (code) => reject(new Error(`troupe worker exited with ${code} before serving`)));
    });
  try {
    for (const count of workerCounts.filter((n) => n > 0)) {
      while (workers.length < count) workers.push(await startWorker());
      if (workers.length === 1) await workerSequential();
      const seconds = await batch(`scale-${count}`, scaleTasks, 'scale');
      print(`scale: ${scaleTasks} tasks with ${count} worker process(es)`, scaleTasks / seconds, 'tasks/s', {
        workers: count,
      });
    }
  } finally {
    for (const worker of workers) worker.kill('SIGTERM');
    await Promise.all(
      workers.map((worker) =>
        worker.exitCode !== null || worker.signalCode !== null
          ? undefined
          : new Promise((resolve) => worker.once('exit', resolve)),
      ),
    );
    await scaleCoordinator.stop();
    await scaleBus.close();
    await rm(home, { recursive: true, force: true });
  }
}

const failed = [...ended].filter(([id, end]) => !id.startsWith('warm') && !end.ok).map(([id]) => id);
print('tasks with a wrong result', failed.length, 'tasks');
print('heap used at the end', process.memoryUsage().heapUsed / 1024 / 1024, 'MiB');

await client.close();
await coordinator.stop();
await tracing?.shutdown();
await bus.close();
await nats.stop();
await rm(workspaceRoot, { recursive: true, force: true });
if (failed.length > 0) process.exitCode = 1;
