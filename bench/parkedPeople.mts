/**
 * N tasks parked on people (issue 33): a pipeline whose one step is `human` (bench/fixtures/people.yaml), the
 * coordinator in this process, the tasks submitted at once. Prints how long until every task is in flight (its
 * question asked: `human.asked` seen), and the heap and RSS per task once they all are — and, with passivation on,
 * once every task is passivated too (its tree stopped, see docs/durability.md "Passivation").
 *
 * With `passivate=<ms>` (anywhere after N) the coordinator passivates a task that has waited that long
 * (`passivateAfterMs`); `passivate=0` keeps every task live, as before tasks waiting on people were passivated. With
 * `snap`, heap snapshots before and after, for bench/heapSnapshotDiff.mjs.
 *
 *   node scripts/bench.mjs parkedPeople [N=2000] [outDir=.] [snap|nosnap] [passivate=<ms>]
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import { connect, type Msg } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { eventsOf, subjects } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';

const passivateArg = process.argv.find((arg) => arg.startsWith('passivate='));
const passivateAfterMs =
  passivateArg === undefined ? undefined : Number(passivateArg.slice('passivate='.length));
const args = process.argv.filter((arg) => arg !== passivateArg);
const tasks = Number(args[2] ?? 2000);
const outDir = args[3] ?? '.';
const snap = args[4] === 'snap';
const WARM = 20;
const gc = () => (globalThis as { gc?: () => void }).gc?.();
const memory = () => {
  gc();
  const { heapUsed, rss } = process.memoryUsage();
  return { heapUsed, rss };
};
const nats = await startTestNats();
const logger = createLogger({ level: 'silent' });
const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-bench-people-'));
const client = await connect({ servers: nats.url, name: 'bench-client' });
const registry = builtinTools();
const bus = await NatsBus.connect({ servers: nats.url, name: 'bench-people', logger });
const coordinator = await startCoordinator({
  bus,
  pipelines: [
    await loadPipeline(join(import.meta.dirname, 'fixtures', 'people.yaml'), { toolNames: registry.names() }),
  ],
  logger,
  workspaceRoot,
  registry,
  maxInFlight: tasks + WARM,
  ...(passivateAfterMs === undefined ? {} : { passivateAfterMs }),
});
const submit = (id: string) =>
  client.publish(subjects.task('people'), JSON.stringify({ id, goal: 'ask a person' }));
/** The tasks whose question was asked, alone on its subject or in a batch. */
const asked = new Set<string>();
let onAsked: (() => void) | undefined;
const callback = (_e: unknown, msg: Msg) => {
  const parsed = eventsOf(msg.data, msg.subject);
  if (!parsed.ok) return;
  for (const event of parsed.value) if (event.kind === 'human.asked') asked.add(event.taskId);
  onAsked?.();
};
client.subscribe(subjects.event('people', '*', 'human.asked'), { callback });
client.subscribe(subjects.eventBatch('people', '*'), { callback });
await client.flush();
const until = (n: number) =>
  new Promise<void>((resolve) => {
    onAsked = () => asked.size >= n && resolve();
    onAsked();
  });
const untilPassivated = async (n: number) => {
  while (coordinator.passivated() < n) await new Promise((resolve) => setTimeout(resolve, 100));
};

// Warm: 20 tasks so code paths, streams and consumers exist before the baseline.
for (let i = 0; i < WARM; i++) submit(`warm-${i}`);
await client.flush();
await until(WARM);
const passivating = passivateAfterMs !== 0;
if (passivating) await untilPassivated(WARM);
const before = memory();
if (snap) writeHeapSnapshot(join(outDir, 'before.heapsnapshot'));
const t0 = performance.now();
for (let i = 0; i < tasks; i++) submit(`person-${i}`);
await client.flush();
await until(tasks + WARM);
const inFlightS = (performance.now() - t0) / 1000;
const perTask = (now: { heapUsed: number; rss: number }) => ({
  heapKB: (now.heapUsed - before.heapUsed) / tasks / 1024,
  rssKB: (now.rss - before.rss) / tasks / 1024,
});
const inFlight = perTask(memory());
let asleep: ReturnType<typeof perTask> | undefined;
let passivatedS: number | undefined;
if (passivating) {
  await untilPassivated(tasks + WARM);
  passivatedS = (performance.now() - t0) / 1000;
  asleep = perTask(memory());
}
console.log(
  JSON.stringify({
    tasks,
    allInFlightS: inFlightS,
    inFlight,
    ...(asleep ? { allPassivatedS: passivatedS, passivated: asleep } : {}),
    passivateAfterMs: passivateAfterMs ?? 'default',
  }),
);
if (snap) writeHeapSnapshot(join(outDir, 'after.heapsnapshot'));
process.exit(0);
