import { jetstreamManager } from '@nats-io/jetstream';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { STREAMS, subjects, TroupeEvent } from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath, type Harness, publishTask, startHarness } from './support/harness.ts';
import { readSse } from './support/sse.ts';

const TOKEN = 'batches-admin-token-0123456789ab';
const TASK = 'batched-demo-1';

/** What every reader saw of the demo task, in one mode. */
interface Seen {
  published: string[];
  /** What a plain NATS subscriber to the task's events read through eventsOf (the harness's recorder). */
  recorded: string[];
  batches: number;
  stored: number;
  logs: string[];
  tail: string[];
  sse: string[];
  sseSeqs: number[];
  agui: string[];
  trace: unknown;
  replayCode: number | null;
}

const idsOfJsonLines = (text: string) =>
  text
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => TroupeEvent.parse(JSON.parse(line)).id);

/** Runs the demo once with event batching on or off, and reads its events through every reader. */
async function runWith(eventBatch: boolean): Promise<Seen> {
  const h: Harness = await startHarness([examplePath('demo.yaml')], { eventBatch });
  const gateway: Gateway = await startGateway({
    bus: h.bus,
    logger: createLogger({ level: 'silent' }),
    tokens: new TokenStore([{ name: 'ops', sha256: hashToken(TOKEN), scopes: ['admin'] }]),
    port: 0,
  });
  try {
    const env = cliEnv({ NATS_URL: h.nats.url });
    const published: string[] = [];
    h.bus.onEventPublished((event) => {
      if (event.taskId === TASK) published.push(event.id);
    });
    let batches = 0;
    h.client.subscribe(subjects.eventBatch('demo', TASK), {
      callback: () => {
        batches += 1;
      },
    });
    await h.client.flush();
    // troupe tail, live: watching before the task starts.
    const tail = startTroupe(['tail', '--pipeline', 'demo', '--json'], env);
    await tail.waitFor(/watching all tasks/);
    publishTask(h, 'demo', { id: TASK, goal: 'write a hello note' });
    expect((await h.finalOf(TASK)).kind).toBe('task.completed');
    await tail.waitFor(/"kind":"task\.completed"/);
    await tail.stop();
    const jsm = await jetstreamManager(h.client);
    const stored = async () =>
      (await jsm.streams.info(STREAMS.events, { subjects_filter: subjects.taskEvents(TASK, 'demo') })).state
        .messages;
    await vi.waitFor(() => expect(h.bus.pendingEvents).toBe(0));

    const logs = await troupe(['logs', TASK, '--json'], env);
    expect(logs.code, logs.stderr).toBe(0);
    const sse = await readSse(`${gateway.url}/v1/tasks/${TASK}/events`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    const agui = await readSse(`${gateway.url}/v1/tasks/${TASK}/events?format=ag-ui`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    const trace = await troupe(['trace', TASK, '--json'], env);
    expect(trace.code, trace.stderr).toBe(0);
    const replay = await troupe(['replay', TASK, '--pipeline', examplePath('demo.yaml'), '--json'], env);
    return {
      published,
      recorded: h.eventsOf(TASK).map((e) => e.id),
      batches,
      stored: await stored(),
      logs: idsOfJsonLines(logs.stdout),
      tail: idsOfJsonLines(tail.output()).filter((id) => id.startsWith(`${TASK}:`)),
      sse: sse.messages.map((m) => TroupeEvent.parse(JSON.parse(m.data)).id),
      sseSeqs: sse.messages.map((m) => Number(m.id)),
      agui: agui.messages.map((m) => (JSON.parse(m.data) as { type: string }).type),
      trace: withoutTimes(JSON.parse(trace.stdout)),
      replayCode: replay.code,
    };
  } finally {
    await gateway.close();
    await h.stop();
  }
}

/** A trace with what differs between two runs of the same task (times, durations) left out. */
function withoutTimes(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutTimes);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => !/(^ts$|At$|Ms$|^duration|^started|^ended|^at$|^traceId$|^spanId$)/.test(key))
      .map(([key, inner]) => [key, withoutTimes(inner)]),
  );
}

describe('a task’s events with batching off and on: every reader sees each event, in order, with its id', () => {
  let off: Seen;
  let on: Seen;

  beforeAll(async () => {
    off = await runWith(false);
    on = await runWith(true);
  }, 180_000);

  it('publishes the same facts either way, in fewer messages with batching on', () => {
    expect(on.published).toEqual(off.published);
    expect(off.recorded).toEqual(off.published);
    expect(on.recorded).toEqual(on.published);
    expect(off.batches).toBe(0);
    expect(off.stored).toBe(new Set(off.published).size);
    expect(on.batches).toBeGreaterThan(0);
    expect(on.stored).toBeLessThan(off.stored);
  });

  it('troupe logs and troupe tail show each event once, in the order published', () => {
    for (const seen of [off, on]) {
      const wanted = [...new Set(seen.published)];
      expect(seen.logs).toEqual(wanted);
      expect(seen.tail).toEqual(wanted);
    }
  });

  it('the gateway’s SSE stream sends each event once, in order, with never-decreasing sequences', () => {
    for (const seen of [off, on]) {
      expect(seen.sse).toEqual([...new Set(seen.published)]);
      expect(seen.sseSeqs).toEqual([...seen.sseSeqs].sort((a, b) => a - b));
    }
  });

  it('the AG-UI stream, the trace and the replay are the same with batching on as off', () => {
    expect(on.agui).toEqual(off.agui);
    expect(on.agui.at(-1)).toBe('RUN_FINISHED');
    expect(on.trace).toEqual(off.trace);
    expect(off.replayCode).toBe(0);
    expect(on.replayCode).toBe(0);
  });
});
