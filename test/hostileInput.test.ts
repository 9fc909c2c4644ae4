import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { DEFAULT_INTAKE_LIMITS, taskConsumerName } from '@troupe/coordinator';
import { BUCKETS, STREAMS, subjects, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePath, type Harness, publishTask, startHarness } from './support/harness.ts';

/** `{"goal":"…","input":{"n":{"n":…}}}`, `levels` levels of objects in all. */
const nested = (levels: number): string =>
  `{"goal":"go deep","input":${'{"n":'.repeat(levels - 2)}{}${'}'.repeat(levels - 2)}}`;

describe('hostile task payloads on nats-server 2.9', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('reports 10,000 invalid payloads once each, terminates them, and still runs the valid tasks after them', async () => {
    const count = 10_000;
    const shapes = [
      (i: number) => `not json at all bad-${i}`,
      (i: number) => JSON.stringify({ goal: '', marker: `bad-${i}` }),
      (i: number) => JSON.stringify([`bad-${i}`]),
      (i: number) => JSON.stringify({ goal: `bad-${i}`, extra: true }),
    ];
    for (let i = 0; i < count; i++) {
      h.client.publish(subjects.task('demo'), (shapes[i % shapes.length] as (i: number) => string)(i));
      if (i % 1_000 === 999) await h.client.flush();
    }
    const valid = Array.from({ length: 5 }, (_, i) => `after-flood-${i}`);
    for (const id of valid) publishTask(h, 'demo', { id, goal: 'write a hello note' });

    for (const id of valid) expect((await h.finalOf(id, 120_000)).kind).toBe('task.completed');
    const reportsOf = () => {
      const seen = new Map<string, number>();
      for (const report of h.invalid) {
        const marker = /bad-\d+/.exec(report.payload)?.[0];
        if (marker) seen.set(marker, (seen.get(marker) ?? 0) + 1);
      }
      return seen;
    };
    await expect.poll(() => reportsOf().size, { timeout: 60_000, interval: 200 }).toBe(count);
    const jsm = await jetstreamManager(h.client);
    await expect
      .poll(async () => (await jsm.consumers.info(STREAMS.tasks, taskConsumerName('demo'))).num_ack_pending, {
        timeout: 30_000,
      })
      .toBe(0);
    const consumer = await jsm.consumers.info(STREAMS.tasks, taskConsumerName('demo'));
    // Terminated, not delivered again: nats-server 2.9 takes `+TERM <reason>` for no answer at all.
    expect(consumer.num_redelivered).toBe(0);
    const repeated = [...reportsOf()].filter(([, n]) => n > 1);
    expect(repeated, 'payloads reported more than once').toEqual([]);
    const sample = h.invalid.find((r) => r.payload.includes('bad-1"'));
    expect(sample?.reason).toMatch(
      /^task for pipeline demo refused: payload failed validation: goal: must not be empty/,
    );
  }, 240_000);

  it('refuses a payload nested too deep or too large, naming the limit and how to raise it', async () => {
    h.client.publish(subjects.task('demo'), nested(10_000));
    const deep = await h.nextInvalid((r) => r.payload.includes('go deep'));
    expect(deep.reason).toBe(
      'task for pipeline demo refused: payload nests objects and arrays more than 64 levels deep (raise the limit with troupe up --max-task-depth)',
    );
    h.client.publish(
      subjects.task('demo'),
      JSON.stringify({ goal: 'huge', input: { blob: 'x'.repeat(300_000) } }),
    );
    const large = await h.nextInvalid((r) => r.payload.startsWith('{"goal":"huge"'));
    expect(large.reason).toMatch(
      /^task for pipeline demo refused: payload is 3000\d\d bytes; the limit is 262144 \(raise the limit with troupe up --max-task-bytes\)$/,
    );
    publishTask(h, 'demo', { id: 'after-limits', goal: 'write a hello note' });
    expect((await h.finalOf('after-limits')).kind).toBe('task.completed');
  });
});

describe('a task that passes validation and cannot be checkpointed', () => {
  let h: Harness;

  beforeAll(async () => {
    // The depth limit raised past what a snapshot can hold: the poison gets through intake, as it once did.
    h = await startHarness([examplePath('demo.yaml')], {
      limits: { ...DEFAULT_INTAKE_LIMITS, maxTaskBytes: 1024 * 1024, maxTaskDepth: 1_000_000 },
    });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('fails that task with the reason and keeps serving the others', async () => {
    publishTask(h, 'demo', { id: 'before-poison', goal: 'write a hello note' });
    h.client.publish(subjects.task('demo'), nested(30_000).replace('{"goal"', '{"id":"poison-1","goal"'));
    publishTask(h, 'demo', { id: 'beside-poison', goal: 'write a hello note' });

    const poisoned = await h.finalOf('poison-1', 30_000);
    expect(poisoned.kind).toBe('task.failed');
    if (poisoned.kind !== 'task.failed') return;
    expect(poisoned.data.reason).toBe('checkpoint_failed');
    expect(poisoned.data.message).toMatch(
      /^cannot checkpoint task poison-1: .*(call stack|cannot be encoded)/,
    );
    for (const id of ['before-poison', 'beside-poison']) {
      expect((await h.finalOf(id, 30_000)).kind).toBe('task.completed');
    }
    // The process goes on serving: a task submitted after the poison ended runs to the end.
    publishTask(h, 'demo', { id: 'after-poison', goal: 'write a hello note' });
    expect((await h.finalOf('after-poison')).kind).toBe('task.completed');
    await expect.poll(() => h.coordinator.running()).toEqual([]);
  });
});

describe('a task whose final checkpoint is larger than NATS takes', () => {
  let h: Harness;
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-bulky-'));
    const big = (letter: string) => letter.repeat(450_000);
    await writeFile(
      join(dir, 'bulky.script.json'),
      JSON.stringify({ agents: { writer: [{ content: big('a') }, { content: big('b') }] } }),
    );
    await writeFile(
      join(dir, 'bulky.yaml'),
      `version: 1
name: bulky
models: { scripted: { provider: scripted, script: ./bulky.script.json } }
defaults: { model: scripted }
agents: { writer: { instructions: Write a lot. } }
flow:
  - { id: one, kind: agent, agent: writer }
  - { id: two, kind: agent, agent: writer }
`,
    );
    h = await startHarness([join(dir, 'bulky.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('still records how it ended before its message is acknowledged', async () => {
    publishTask(h, 'bulky', { id: 'bulky-1', goal: 'write two long parts' });
    expect((await h.finalOf('bulky-1')).kind).toBe('task.completed');
    const workflows = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    await expect
      .poll(async () => (await workflows.get('bulky-1'))?.value, { timeout: 20_000 })
      .toMatchObject({ status: 'completed', final: { kind: 'task.completed' } });
    const jsm = await jetstreamManager(h.client);
    await expect
      .poll(async () => (await jsm.consumers.info(STREAMS.tasks, taskConsumerName('bulky'))).num_ack_pending)
      .toBe(0);
  });
});
