import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { OperationError, type SequencedEvent, TroupeClient } from '@troupe/client';
import { STREAMS } from '@troupe/protocol';
import { jetstreamManagerOf } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  publishTask,
  repoRoot,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

/** `@troupe/client` as a user's application uses it: its own connection, against a running coordinator. */
describe('@troupe/client', () => {
  let h: Harness;
  let troupe: TroupeClient;

  beforeAll(async () => {
    // Each event alone (batching off), so every event has a sequence of its own and a reader resumed after any one
    // gets exactly the rest; with batching, a batch's events share its sequence and a reader resumed half-way through
    // gets the batch again (packages/client/test/batchedEvents.test.ts).
    h = await startHarness([examplePath('demo.yaml'), fixturePath('gated.yaml')], { eventBatch: false });
    troupe = await TroupeClient.connect({ servers: h.nats.url, name: 'client-test' });
  });
  afterAll(async () => {
    await troupe?.close();
    await h?.stop();
  });

  it('lists the pipelines the coordinators loaded', async () => {
    const names = (await troupe.pipelines()).map((p) => p.name);
    expect(names).toEqual(['demo', 'gated']);
  });

  it('submits a task, follows its events to the end, and reads its result and trace', async () => {
    const { taskId, duplicate } = await troupe.submit('demo', { goal: 'Write a short hello note' });
    expect(duplicate).toBe(false);
    const seen: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId)) seen.push(event);
    const kinds = seen.map((e) => e.event.kind);
    expect(kinds[0]).toBe('task.accepted');
    expect(kinds.at(-1)).toBe('task.completed');
    // Stream order: every sequence after the one before it.
    expect(seen.every((e, i) => i === 0 || e.seq > (seen[i - 1]?.seq ?? 0))).toBe(true);

    const result = await troupe.wait(taskId);
    expect(result).toMatchObject({ taskId, pipeline: 'demo', status: 'completed' });
    expect(result.output).toEqual(expect.any(String));
    expect(await troupe.result(taskId)).toEqual(result);

    const trace = await troupe.trace(taskId);
    // Each of the pipeline's steps ran (a review may send the work round again), and each model call is counted.
    expect(new Set(trace.steps.map((s) => s.step))).toEqual(
      new Set((await troupe.pipelines()).find((p) => p.name === 'demo')?.steps),
    );
    expect(trace.totals.modelCalls).toBeGreaterThanOrEqual(trace.steps.length);
    expect((await troupe.tasks({ pipeline: 'demo' })).map((r) => r.taskId)).toContain(taskId);
  });

  it('resumes events after the last sequence a reader saw: nothing lost, nothing twice', async () => {
    const { taskId } = await troupe.submit('demo', { goal: 'Write another note' });
    await troupe.wait(taskId);
    const all: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId)) all.push(event);
    const cut = Math.floor(all.length / 2);
    const first: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId)) {
      first.push(event);
      if (first.length === cut) break;
    }
    const rest: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId, { after: first.at(-1)?.seq ?? 0 })) rest.push(event);
    expect([...first, ...rest].map((e) => e.event.id)).toEqual(all.map((e) => e.event.id));
    // Resumed after the final event itself: nothing is to come, and the iteration ends at once.
    const after: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId, { after: all.at(-1)?.seq ?? 0 })) after.push(event);
    expect(after).toEqual([]);
  });

  it('refuses a second task with the same id, and names an unknown pipeline', async () => {
    const { taskId } = await troupe.submit('demo', { id: 'client-once', goal: 'Once' });
    await troupe.wait(taskId);
    const again = await troupe.submit('demo', { id: 'client-once', goal: 'Once more' });
    expect(again.duplicate).toBe(true);
    expect(again.record?.status).toBe('completed');
    for (const extra of [
      { inputRef: { bucket: 'troupe-inputs-demo', name: 'client-ref.input.1' } },
      { parent: { taskId: 'p', pipeline: 'demo', step: 's', depth: 1 } },
    ]) {
      // Not a NewTask's: an application in JavaScript may still send it.
      const refused = await troupe.submit('demo', { goal: 'x', ...extra } as never).catch((e: unknown) => e);
      expect(OperationError.is(refused, 'invalid_request')).toBe(true);
    }
    const unknown = await troupe.submit('nope', { goal: 'x' }).catch((e: unknown) => e);
    expect(OperationError.is(unknown, 'not_found')).toBe(true);
    expect((unknown as Error).message).toContain('loaded: demo, gated');
  });

  it('says not_found for an id no task can have, and follows no wildcard of one', async () => {
    for (const id of ['>', '*', 'a b', 'x.y', '']) {
      for (const call of [
        troupe.task(id),
        troupe.result(id),
        troupe.cancel(id),
        troupe.trace(id),
        troupe.wait(id, { pipeline: 'demo', timeoutMs: 5_000 }),
        (async () => {
          for await (const _ of troupe.events(id, { pipeline: 'demo' })) return 'followed';
        })(),
      ]) {
        await expect(call).rejects.toMatchObject({ name: 'OperationError', code: 'not_found' });
      }
    }
    const wild = (async () => {
      for await (const _ of troupe.events('no-such-task', { pipeline: '>' })) return 'followed';
    })();
    await expect(wild).rejects.toMatchObject({ name: 'OperationError', code: 'not_found' });
  });

  it('lists a pending approval and decides it: the task goes on to complete', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v1' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    const [request] = await troupe.approvals({ taskId });
    expect(request).toMatchObject({ kind: 'approval', taskId, pipeline: 'gated', agent: 'executor' });
    const decided = await troupe.decide(request?.id ?? '', {
      kind: 'approval',
      decision: { decision: 'allow', by: 'client-test' },
    });
    expect(decided.status).toBe('allowed');
    expect((await troupe.wait(taskId, { timeoutMs: 30_000 })).status).toBe('completed');
    // Decided once: a second decision changes nothing and says why.
    const twice = await troupe
      .decide(request?.id ?? '', { kind: 'approval', decision: { decision: 'deny', reason: 'late' } })
      .catch((e: unknown) => e);
    expect(OperationError.is(twice, 'conflict')).toBe(true);
  });

  it('refuses a malformed decision or answer with invalid_request, naming what is wrong', async () => {
    const empty = await troupe
      .decide('some-request', { kind: 'question', answer: { answer: '' } })
      .catch((e: unknown) => e);
    expect(OperationError.is(empty, 'invalid_request')).toBe(true);
    expect((empty as Error).message).toMatch(/^the answer failed validation: answer: /);
    const maybe = await troupe
      .decide('some-request', { kind: 'approval', decision: { decision: 'maybe' } } as never)
      .catch((e: unknown) => e);
    expect(OperationError.is(maybe, 'invalid_request')).toBe(true);
    expect((maybe as Error).message).toContain('decision');
  });

  it('runs examples/client.ts, as docs/client.md shows it', async () => {
    const run = promisify(execFile);
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', join(repoRoot, 'examples', 'client.ts'), 'demo', 'Write a short hello note'],
      { cwd: repoRoot, env: { ...process.env, NATS_URL: h.nats.url }, timeout: 60_000 },
    );
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^submitted \S+ to demo$/);
    expect(lines).toContainEqual(expect.stringMatching(/^#\d+ task\.accepted$/));
    expect(lines).toContainEqual(expect.stringMatching(/^#\d+ step\.started planner$/));
    expect(lines.at(-1)).toMatch(/^completed: /);
  }, 90_000);

  /** The consumers on EVENTS that read this task's events: each follower of the task makes one. */
  async function consumersOf(taskId: string): Promise<number> {
    const jsm = await jetstreamManagerOf(h.bus);
    let n = 0;
    for await (const c of jsm.consumers.list(STREAMS.events)) {
      const filters = [c.config.filter_subject, ...(c.config.filter_subjects ?? [])];
      if (filters.some((f) => f?.includes(taskId))) n++;
    }
    return n;
  }

  it('leaves no consumer on the server when an events() reader stops early or waiting times out', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v3' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    // A reader that breaks off after the first event.
    for await (const _ of troupe.events(taskId)) break;
    expect(await consumersOf(taskId)).toBe(0);
    // A reader waiting for the next event when its signal aborts.
    const stop = new AbortController();
    const read: string[] = [];
    const reading = (async () => {
      for await (const { event } of troupe.events(taskId, { signal: stop.signal })) read.push(event.kind);
    })();
    await expect.poll(() => read.length).toBeGreaterThan(0);
    await expect.poll(() => consumersOf(taskId)).toBe(1);
    stop.abort();
    await reading;
    expect(await consumersOf(taskId)).toBe(0);
    // A wait that times out, and one whose signal aborts.
    await expect(troupe.wait(taskId, { timeoutMs: 300 })).rejects.toMatchObject({ code: 'unavailable' });
    expect(await consumersOf(taskId)).toBe(0);
    const give = new AbortController();
    const waiting = troupe.wait(taskId, { signal: give.signal });
    await expect.poll(() => consumersOf(taskId)).toBe(1);
    give.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    expect(await consumersOf(taskId)).toBe(0);
    await troupe.cancel(taskId);
  });

  it('honours a signal aborted before the call: wait rejects and events end at once, following nothing', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v4' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    const aborted = AbortSignal.abort(new Error('already gone'));
    await expect(troupe.wait(taskId, { signal: aborted })).rejects.toThrow('already gone');
    const read: SequencedEvent[] = [];
    for await (const event of troupe.events(taskId, { signal: aborted })) read.push(event);
    expect(read).toEqual([]);
    expect(await consumersOf(taskId)).toBe(0);
    await troupe.cancel(taskId);
  }, 30_000);

  it('ends an events() reader with unavailable, not as if the task ended, when its connection closes', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v5' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    const own = await TroupeClient.connect({ servers: h.nats.url, name: 'client-test-closing' });
    const seen: SequencedEvent[] = [];
    const reading = (async () => {
      for await (const event of own.events(taskId)) seen.push(event);
    })();
    await expect.poll(() => seen.length).toBeGreaterThan(0);
    await own.close();
    const error = await reading.catch((e: unknown) => e);
    expect(OperationError.is(error, 'unavailable')).toBe(true);
    expect((error as Error).message).toContain('stopped before it ended');
    await troupe.cancel(taskId);
  });

  it('refuses an after that is no stream sequence', async () => {
    for (const after of [-1, 1.5, Number.NaN]) {
      const read = (async () => {
        for await (const _ of troupe.events('any-task', { pipeline: 'demo', after })) return 'followed';
      })();
      await expect(read).rejects.toMatchObject({ name: 'OperationError', code: 'invalid_request' });
    }
  });

  it('tells, pauses and resumes a running task, its record saying it is paused while it is', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v3' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    const { messageId } = await troupe.tell(taskId, 'write the release notes first', { by: 'ana' });
    expect(messageId).toMatch(/\S/);
    await troupe.pause(taskId, { reason: 'hold the release', by: 'ana' });
    expect((await troupe.task(taskId)).paused).toMatchObject({ by: 'ana', reason: 'hold the release' });
    const twice = await troupe.pause(taskId).catch((e: unknown) => e);
    expect(OperationError.is(twice, 'conflict')).toBe(true);
    await troupe.resume(taskId, { by: 'ana' });
    expect((await troupe.task(taskId)).paused).toBeUndefined();
    const notHeld = await troupe.resume(taskId).catch((e: unknown) => e);
    expect(OperationError.is(notHeld, 'conflict')).toBe(true);
    await troupe.cancel(taskId);
    await troupe.wait(taskId, { timeoutMs: 30_000 });
    const late = await troupe.tell(taskId, 'too late').catch((e: unknown) => e);
    expect(OperationError.is(late, 'conflict')).toBe(true);
  });

  it('cancels a running task, and gives up waiting at its timeout', async () => {
    const { taskId } = await troupe.submit('gated', { goal: 'release v2' });
    await expect.poll(async () => (await troupe.approvals({ taskId })).length, { timeout: 20_000 }).toBe(1);
    const early = await troupe.wait(taskId, { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(OperationError.is(early, 'unavailable')).toBe(true);
    await troupe.cancel(taskId, 'not today');
    expect(await troupe.wait(taskId, { timeoutMs: 30_000 })).toMatchObject({ taskId, status: 'cancelled' });
    const again = await troupe.cancel(taskId).catch((e: unknown) => e);
    expect(OperationError.is(again, 'conflict')).toBe(true);
  });
});

describe('a pipeline that declares its input schema', () => {
  let h: Harness;
  let troupe: TroupeClient;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')]);
    troupe = await TroupeClient.connect({ servers: h.nats.url });
  });
  afterAll(async () => {
    await troupe?.close();
    await h?.stop();
  });

  it('registers the schema, runs a task that fits it, and refuses one that does not before storing it', async () => {
    const [registration] = await troupe.pipelines();
    expect(registration?.input).toMatchObject({ required: ['numbers'] });

    const { taskId } = await troupe.submit('summing', { goal: 'add', input: { numbers: [1, 2, 3] } });
    expect(await troupe.wait(taskId)).toMatchObject({ status: 'completed', output: '6' });

    const refused = await troupe
      .submit('summing', { id: 'sum-bad', goal: 'add', input: { numbers: ['one'] } })
      .catch((e: unknown) => e);
    expect(OperationError.is(refused, 'invalid_request')).toBe(true);
    expect((refused as Error).message).toContain('input.numbers[0]');
    const missing = await troupe.submit('summing', { goal: 'add' }).catch((e: unknown) => e);
    expect((missing as Error).message).toContain('input.numbers');
    // Nothing was stored: the id is free.
    await expect(troupe.task('sum-bad')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('refuses a task published straight onto NATS whose input does not fit, and reports why', async () => {
    publishTask(h, 'summing', { id: 'sum-raw', goal: 'add', input: { numbers: [] } });
    const report = await h.nextInvalid((e) => e.payload.includes('sum-raw'));
    expect(report.reason).toContain("does not match the pipeline's input schema");
    expect(report.issues.map((i) => i.path)).toContain('input.numbers');
    await expect(troupe.task('sum-raw')).rejects.toMatchObject({ code: 'not_found' });
  });
});

describe('a task still queued: submitted while no coordinator runs', () => {
  let h: Harness;
  let troupe: TroupeClient;
  let second: { stop(): Promise<void> } | undefined;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')]);
    // The pipeline stays registered; nothing takes its tasks until another coordinator starts.
    await h.coordinator.stop();
    troupe = await TroupeClient.connect({ servers: h.nats.url });
  });
  afterAll(async () => {
    await troupe?.close();
    await second?.stop();
    await h?.stop();
  });

  it('is found by the client that submitted it, and waited for until a coordinator runs it', async () => {
    const { taskId } = await troupe.submit('summing', { goal: 'add', input: { numbers: [1, 2, 3] } });
    await expect(troupe.task(taskId)).rejects.toMatchObject({ code: 'not_found' });
    expect(await troupe.result(taskId)).toBeUndefined();
    const early = await troupe.cancel(taskId).catch((e: unknown) => e);
    expect(OperationError.is(early, 'not_found')).toBe(true);
    expect((early as Error).message).toContain(`task ${taskId} is still queued`);
    await expect(troupe.wait(taskId, { timeoutMs: 200 })).rejects.toMatchObject({ code: 'unavailable' });
    // Another client knows it only with its pipeline.
    const other = new TroupeClient(h.bus);
    await expect(other.result(taskId)).rejects.toMatchObject({ code: 'not_found' });
    await expect(other.wait(taskId)).rejects.toMatchObject({ code: 'not_found' });
    const waiting = other.wait(taskId, { pipeline: 'summing', timeoutMs: 30_000 });
    second = await startSecondCoordinator(h, ['summing.yaml']);
    expect(await waiting).toMatchObject({ taskId, status: 'completed', output: '6' });
    expect(await troupe.result(taskId)).toMatchObject({ status: 'completed', output: '6' });
  });
});

describe('a client of a NATS server no coordinator has used', () => {
  it('says no_coordinator there, and unavailable once its own connection is closed', async () => {
    const nats = await startTestNats();
    try {
      const troupe = await TroupeClient.connect({ servers: nats.url });
      await expect(troupe.pipelines()).rejects.toMatchObject({ code: 'no_coordinator' });
      await expect(troupe.submit('demo', { goal: 'x' })).rejects.toMatchObject({ code: 'no_coordinator' });
      await troupe.close();
      await expect(troupe.pipelines()).rejects.toMatchObject({ code: 'unavailable' });
      await expect(troupe.submit('demo', { goal: 'x' })).rejects.toMatchObject({ code: 'unavailable' });
    } finally {
      await nats.stop();
    }
  });
});
