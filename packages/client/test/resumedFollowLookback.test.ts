import { STREAMS } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import type * as Bus from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { followTaskEvents, type SequencedEvent } from '../src/storedEvents.ts';

/** A stream sequence to delete once the next reader opened has counted what it will read, before it reads. */
const vanish: { seq?: number | undefined } = {};

vi.mock('@troupe/runtime/bus', async (original) => {
  const bus = await original<typeof Bus>();
  return {
    ...bus,
    openStreamReader: async (...args: Parameters<typeof Bus.openStreamReader>) => {
      const reader = await bus.openStreamReader(...args);
      const seq = vanish.seq;
      if (seq === undefined) return reader;
      vanish.seq = undefined;
      return {
        ...reader,
        // Aged out (max_age, max_bytes) between the count and the read, as EVENTS drops its oldest.
        read: async () => {
          await (await bus.jetstreamManagerOf(args[0])).streams.deleteMessage(STREAMS.events, seq);
          return await reader.read();
        },
      };
    },
  };
});

const { connectBus, ensureTroupeStreams } = await import('@troupe/runtime/bus');

let nats: TestNats;
let bus: Bus.JetStreamBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'lookback-test', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

describe("a resumed follow of a task's events", () => {
  it('goes on when an event it counted to look back over is gone before it is read', async () => {
    const events = new EventFactory();
    const scope = {
      pipeline: 'demo',
      taskId: 'aged-1',
      traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`,
    };
    const since = new Date().toISOString();
    const ref = { step: 'plan', agent: 'planner', round: 1, stepId: 'aged-1.plan.1' };
    await bus.publishEvent(events.make('task.accepted', scope, { goal: 'g' }));
    await bus.publishEvent(events.make('task.paused', scope, { state: 'plan', round: 1, by: 'ana', since }));
    await bus.publishEvent(events.make('step.started', scope, ref));
    const stored: SequencedEvent[] = [];
    const history = new AbortController();
    // The client's first follow: what it had before it went away.
    const first = followTaskEvents(bus, scope, {
      signal: history.signal,
      onEvent: (event) => void stored.push(event),
    });
    await expect.poll(() => stored.length).toBe(3);
    history.abort();
    await first;
    const accepted = stored[0]?.seq ?? 0;
    const after = stored[2]?.seq ?? 0;

    // It comes back after the step started; the task's task.accepted ages out as it looks back.
    vanish.seq = accepted;
    const resumed: SequencedEvent[] = [];
    const again = new AbortController();
    const following = followTaskEvents(bus, scope, {
      after,
      signal: again.signal,
      onEvent: (event) => void resumed.push(event),
    });
    await bus.publishEvent(
      events.make('step.completed', scope, {
        ...ref,
        ok: true,
        output: 'the plan',
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        turns: 1,
        durationMs: 1,
      }),
    );
    try {
      await expect
        .poll(() => resumed.map((e) => e.event.kind), { timeout: 10_000, interval: 100 })
        .toEqual(['step.completed']);
    } finally {
      again.abort();
      await following;
    }
  });
});
