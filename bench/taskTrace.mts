/**
 * Every NATS message of one task of the core workload, in the order this process saw them, with the time since
 * the task was submitted: what a task's critical path is made of. The observer shares the process (and its event
 * loop) with the coordinator and the agents, so a late time also says the process was busy. 20 tasks warm up first;
 * with more than one task traced, the last one's messages are listed, with the p50 of all.
 *
 * With --summary, the last task's messages are also grouped by what they are for (bench/traceSummary.mts): counts
 * per kind (requests and their replies, JetStream publishes and their PubAcks, KV writes and reads by key kind,
 * heartbeats, events by kind, the task message's acks) and the round trips the trace shows in a row.
 *
 *   node scripts/bench.mjs taskTrace [tasks=1] [--summary]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { FINAL_EVENT_KINDS, parseMessage, subjects, TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';
import { summarize, type TracedMessage } from './traceSummary.mts';

const args = process.argv.slice(2);
const summary = args.includes('--summary');
const traced = Number(args.find((a) => a !== '--summary') ?? 1);
const nats = await startTestNats();
const logger = createLogger({ level: process.env.TROUPE_BENCH_LOG ?? 'silent' });
const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-bench-trace-'));
const client = await connect({ servers: nats.url, name: 'bench-client' });
const bus = await NatsBus.connect({ servers: nats.url, name: 'bench-coordinator', logger });
const registry = builtinTools();
const pipeline = await loadPipeline(join(import.meta.dirname, 'fixtures', 'core.yaml'), {
  toolNames: registry.names(),
});
// As in bench/core.mts: TROUPE_BENCH_LOCAL_STEPS sets the coordinator's maxLocalSteps.
const coordinator = await startCoordinator({
  bus,
  pipelines: [pipeline],
  logger,
  workspaceRoot,
  registry,
  ...(process.env.TROUPE_BENCH_LOCAL_STEPS
    ? { maxLocalSteps: Number(process.env.TROUPE_BENCH_LOCAL_STEPS) }
    : {}),
});

const ended = new Map<string, () => void>();
client.subscribe(subjects.allTaskEvents, {
  callback: (_e, msg) => {
    const parsed = parseMessage(TroupeEvent, msg.data);
    if (parsed.ok && FINAL_EVENT_KINDS.includes(parsed.value.kind)) ended.get(parsed.value.taskId)?.();
  },
});
let seen: TracedMessage[] = [];
client.subscribe('>', {
  callback: (_e, msg) => {
    seen.push({
      at: performance.now(),
      subject: msg.subject,
      reply: msg.reply || undefined,
      size: msg.data.length,
      // Enough of the body to name an event's kind, an ack's verb or a heartbeat, kept only when summarizing.
      // A batch whole, to count the events it carries.
      text: summary
        ? new TextDecoder().decode(msg.subject.endsWith('.batch') ? msg.data : msg.data.subarray(0, 400))
        : undefined,
      expectedSeq: msg.headers?.get('Nats-Expected-Last-Subject-Sequence') || undefined,
    });
  },
});
await client.flush();
const run = (id: string) =>
  new Promise<void>((resolve) => {
    ended.set(id, resolve);
    client.publish(subjects.task('core'), JSON.stringify({ id, goal: 'write out.txt' }));
  });
for (let i = 0; i < 20; i++) await run(`warm-${i}`);

const totals: number[] = [];
let started = 0;
for (let i = 0; i < traced; i++) {
  // The summary counts one task's messages only: the one before it first finishes its end (its acks, its reads).
  if (summary && i === traced - 1) await new Promise((resolve) => setTimeout(resolve, 50));
  seen = [];
  started = performance.now();
  await run(`trace-${i}`);
  totals.push(performance.now() - started);
}
// The messages that follow the final event (acks, the end's reads) belong to the task too.
await new Promise((resolve) => setTimeout(resolve, 50));
totals.sort((a, b) => a - b);
console.log(
  `${traced} task(s), p50 ${totals[Math.floor(traced / 2)]?.toFixed(2)} ms; the last one's messages:`,
);
let last = started;
for (const m of seen) {
  const subject = m.subject.replace(/_INBOX\.[A-Za-z0-9]+/, '_INBOX').replace(/\$JS\.ACK\..*/, '$JS.ACK…');
  const at = `${(m.at - started).toFixed(2).padStart(7)} +${(m.at - last).toFixed(2).padStart(5)}`;
  console.log(`${at}  ${subject}${m.reply ? ' (request)' : ''} ${m.size} B`);
  last = m.at;
}
if (summary) for (const line of summarize(seen, started)) console.log(line);

await client.close();
await coordinator.stop();
await bus.close();
await nats.stop();
await rm(workspaceRoot, { recursive: true, force: true });
