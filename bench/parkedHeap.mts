/**
 * The parked phase of bench/core.mts alone (its fixture, tasks whose model answers after 20 s, coordinator and agent
 * host in this process), with a heap snapshot once 20 tasks are in flight and another once N more are: what a parked
 * task keeps, for bench/heapSnapshotDiff.mjs to break down. Prints the heap per task in flight as core.mts does.
 * N must be in flight within the model's 20 s (1,000 takes about 10 s here).
 *
 * With `ended` last, it then waits for every task to end and reports (and snapshots, as ended.heapsnapshot) what the
 * coordinator still holds. A task's events go in batches by default (`TROUPE_EVENT_BATCH=0`, read by the bus, sends
 * each alone), read here through `eventsOf`.
 *
 * With `passivate=<ms>` (anywhere after N) the coordinator passivates a task whose step has waited on its model that
 * long (`passivateAfterMs`, docs/durability.md): the heap is measured once that time (and the passivation sweep's)
 * has passed after the last task is in flight, so every task is passivated by then (500 keeps that well before the
 * model's 20 s). `passivate=0` keeps every task live, as before passivation; without it, the coordinator's default
 * (5 s) applies and the heap is measured as the last task is in flight, only the tasks that waited 5 s passivated.
 *
 *   node scripts/bench.mjs parkedHeap [N=1000] [outDir=.] [snap|nosnap] [ended] [passivate=<ms>]
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import { connect, type Msg } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { type EventKind, eventsOf, subjects } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';

const passivateArg = process.argv.find((arg) => arg.startsWith('passivate='));
const passivateAfterMs =
  passivateArg === undefined ? undefined : Number(passivateArg.slice('passivate='.length));
const args = process.argv.filter((arg) => arg !== passivateArg);
const parked = Number(args[2] ?? 1000);
const outDir = args[3] ?? '.';
const snap = args[4] !== 'nosnap';
const heapUsed = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};
const nats = await startTestNats();
const logger = createLogger({ level: 'silent' });
const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-bench-heap-'));
const client = await connect({ servers: nats.url, name: 'bench-client' });
const registry = builtinTools();
const parkedBus = await NatsBus.connect({ servers: nats.url, name: 'bench-parked', logger });
await startCoordinator({
  bus: parkedBus,
  pipelines: [
    await loadPipeline(join(import.meta.dirname, 'fixtures', 'parked.yaml'), { toolNames: registry.names() }),
  ],
  logger,
  workspaceRoot,
  registry,
  maxInFlight: parked + 20,
  ...(passivateAfterMs === undefined ? {} : { passivateAfterMs }),
});
const submit = (id: string) =>
  client.publish(subjects.task('parked'), JSON.stringify({ id, goal: 'write out.txt' }));
/** Calls `seen` with the id of each task an event of `kind` comes for, alone on its subject or in a batch. */
const follow = (kind: EventKind, seen: (taskId: string) => void) => {
  const callback = (_e: unknown, msg: Msg) => {
    const parsed = eventsOf(msg.data, msg.subject);
    if (!parsed.ok) return;
    for (const event of parsed.value) if (event.kind === kind) seen(event.taskId);
  };
  client.subscribe(subjects.event('parked', '*', kind), { callback });
  client.subscribe(subjects.eventBatch('parked', '*'), { callback });
};
const started = new Set<string>();
let onStarted: (() => void) | undefined;
follow('step.started', (taskId) => {
  started.add(taskId);
  onStarted?.();
});
await client.flush();
const until = (n: number) =>
  new Promise<void>((resolve) => {
    onStarted = () => started.size >= n && resolve();
    onStarted();
  });
// Warm: 20 tasks so code paths, streams and consumers exist before the baseline.
for (let i = 0; i < 20; i++) submit(`warm-${i}`);
await client.flush();
await until(20);
const before = heapUsed();
if (snap) writeHeapSnapshot(join(outDir, 'before.heapsnapshot'));
const t0 = performance.now();
for (let i = 0; i < parked; i++) submit(`parked-${i}`);
await client.flush();
await until(parked + 20);
const inFlight = performance.now() - t0;
// Every task passivated: the last one waited `passivateAfterMs`, and the sweep (every half of it) found it.
if (passivateAfterMs !== undefined && passivateAfterMs > 0)
  await new Promise((resolve) => setTimeout(resolve, passivateAfterMs * 1.5 + 100));
const after = heapUsed();
console.log(
  JSON.stringify({
    parked,
    allInFlightS: inFlight / 1000,
    perTaskKB: (after - before) / parked / 1024,
    ...(passivateAfterMs === undefined ? {} : { passivateAfterMs }),
  }),
);
if (snap) writeHeapSnapshot(join(outDir, 'after.heapsnapshot'));
if (args[5] === 'ended') {
  // Once every task has ended, with the coordinator still running: what it keeps of ended tasks.
  const ended = new Set<string>();
  await new Promise<void>((resolve) => {
    follow('task.completed', (taskId) => {
      if (taskId.startsWith('parked-')) ended.add(taskId);
      if (ended.size >= parked) resolve();
    });
  });
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const end = heapUsed();
  console.log(
    JSON.stringify({
      endedAgainstBeforePct: ((end - before) / before) * 100,
      perTaskKB: (end - before) / parked / 1024,
    }),
  );
  if (snap) writeHeapSnapshot(join(outDir, 'ended.heapsnapshot'));
}
process.exit(0);
