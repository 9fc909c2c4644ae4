/**
 * How a pipeline copes with a flood of invalid task payloads: how fast they are refused (each reported once on
 * troupe.events._invalid and terminated), and how long valid tasks sent right after them take to complete.
 * Real nats-server, a coordinator hosting the demo pipeline's agents, everything in one process.
 *
 *   npx tsx bench/hostileIntake.mts [invalid=10000] [valid=20]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, startCoordinator, taskConsumerName } from '@troupe/coordinator';
import { FINAL_EVENT_KINDS, parseMessage, STREAMS, subjects, TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';

const invalidCount = Number(process.argv[2] ?? 10_000);
const validCount = Number(process.argv[3] ?? 20);

const nats = await startTestNats();
const logger = createLogger({ level: 'silent' });
const bus = await NatsBus.connect({ servers: nats.url, name: 'bench-coordinator', logger });
const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-bench-'));
const registry = builtinTools();
const demo = await loadPipeline(join(import.meta.dirname, '..', 'examples', 'demo.yaml'), {
  toolNames: registry.names(),
});
const coordinator = await startCoordinator({ bus, pipelines: [demo], logger, workspaceRoot, registry });
const client = await connect({ servers: nats.url, name: 'bench-user' });

let reports = 0;
const ended = new Map<string, number>();
client.subscribe(subjects.invalid, {
  callback: () => {
    reports += 1;
  },
});
client.subscribe(subjects.allTaskEvents, {
  callback: (_error, msg) => {
    const parsed = parseMessage(TroupeEvent, msg.data);
    if (parsed.ok && FINAL_EVENT_KINDS.includes(parsed.value.kind))
      ended.set(parsed.value.taskId, performance.now());
  },
});
await client.flush();

const until = async (done: () => boolean) => {
  while (!done()) await new Promise((resolve) => setTimeout(resolve, 5));
};

const started = performance.now();
for (let i = 0; i < invalidCount; i++) {
  client.publish(subjects.task('demo'), i % 2 === 0 ? `not json ${i}` : JSON.stringify({ goal: '', n: i }));
  if (i % 1_000 === 999) await client.flush();
}
await client.flush();
const published = performance.now();
const sentAt = new Map<string, number>();
for (let i = 0; i < validCount; i++) {
  const id = `valid-${i}`;
  sentAt.set(id, performance.now());
  client.publish(subjects.task('demo'), JSON.stringify({ id, goal: 'write a hello note' }));
}
await until(() => reports >= invalidCount);
const refused = performance.now();
await until(() => ended.size >= validCount);
const latencies = [...sentAt].map(([id, at]) => (ended.get(id) ?? at) - at).sort((a, b) => a - b);
const jsm = await jetstreamManager(client);
const consumer = await jsm.consumers.info(STREAMS.tasks, taskConsumerName('demo'));

const print = (figure: string, value: number, unit: string) =>
  console.log(JSON.stringify({ bench: 'hostile-intake', figure, value: Math.round(value * 10) / 10, unit }));
print('invalid payloads', invalidCount, 'messages');
print('publish time', published - started, 'ms');
print('all refused and reported', refused - started, 'ms');
print('refusals per second', invalidCount / ((refused - started) / 1000), 'msg/s');
print('reports per payload', reports / invalidCount, 'reports');
print('valid task p50 after the flood', latencies[Math.floor(latencies.length / 2)] ?? 0, 'ms');
print('valid task max after the flood', latencies.at(-1) ?? 0, 'ms');
print('ack pending at the end', consumer.num_ack_pending, 'messages');
print('redelivered', consumer.num_redelivered, 'messages');

await client.close();
await coordinator.stop();
await bus.close();
await nats.stop();
await rm(workspaceRoot, { recursive: true, force: true });
