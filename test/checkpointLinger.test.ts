import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, eventsOf, FINAL_EVENT_KINDS, subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, startTroupe } from './support/cli.ts';

const pipeline = `version: 1
name: lingered
models:
  scripted: { provider: scripted, script: ./lingered.script.yaml }
defaults: { model: scripted }
agents:
  planner: { instructions: Plan it. }
  executor: { instructions: Do it. }
  reviewer: { instructions: Review it. }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: execute, kind: agent, agent: executor }
  - { id: review, kind: agent, agent: reviewer }
`;
const script = `agents:
  planner:
    - content: planned
  executor:
    - content: done
  reviewer:
    - content: looks right
`;

/**
 * `troupe up --checkpoint-linger`: how long the checkpoint that records a step run in the coordinator's process waits
 * for the next write while only such steps follow (docs/durability.md, "A local step's final reply"). Watched on
 * the task record's subject: each write of it, and the state it holds.
 */
describe('troupe up --checkpoint-linger', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let dir: string;
  const events: TroupeEvent[] = [];
  const writes = new Map<string, string[]>();

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-linger-'));
    await writeFile(join(dir, 'lingered.yaml'), pipeline);
    await writeFile(join(dir, 'lingered.script.yaml'), script);
    client = await connect({ servers: nats.url, name: 'linger-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        const parsed = eventsOf(msg.data, msg.subject);
        if (parsed.ok) events.push(...parsed.value);
      },
    });
    client.subscribe(`$KV.${BUCKETS.workflows}.>`, {
      callback: (_error, msg) => {
        const taskId = msg.subject.slice(`$KV.${BUCKETS.workflows}.`.length);
        const { state } = JSON.parse(new TextDecoder().decode(msg.data)) as { state?: unknown };
        writes.set(taskId, [...(writes.get(taskId) ?? []), JSON.stringify(state)]);
      },
    });
    await client.flush();
  }, 60_000);
  afterAll(async () => {
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Runs one task under `troupe up` with `args`; the states its record was written in, in order. */
  const run = async (taskId: string, args: string[]) => {
    const up: CliProcess = startTroupe([
      'up',
      join(dir, 'lingered.yaml'),
      '--server',
      nats.url,
      '--home',
      join(dir, `home-${taskId}`),
      ...args,
    ]);
    try {
      await up.waitFor(/troupe is up/);
      client.publish(subjects.task('lingered'), JSON.stringify({ id: taskId, goal: 'plan, do, review' }));
      await expect
        .poll(() => events.find((e) => e.taskId === taskId && FINAL_EVENT_KINDS.includes(e.kind))?.kind, {
          timeout: 30_000,
        })
        .toBe('task.completed');
    } finally {
      expect(await up.stop()).toBe(0);
    }
    return writes.get(taskId) ?? [];
  };

  it('writes the record entering each step after the first with 0, which the default leaves to the next write', async () => {
    // Three quick steps run here: by default the record waits through the executor and the reviewer (each ends
    // within the linger), and the final record holds their outputs.
    const every = await run('linger-0', ['--checkpoint-linger', '0']);
    expect(every.slice(0, 3)).toEqual(['"plan"', '"execute"', '"review"']);
    expect(every.length).toBeGreaterThanOrEqual(4);
  }, 60_000);

  it('refuses a linger that is no number of seconds', async () => {
    const up = startTroupe(['up', join(dir, 'lingered.yaml'), '--checkpoint-linger', 'soon']);
    expect(await up.exited()).toBe(1);
    expect(up.output()).toMatch(/--checkpoint-linger.*must be 0 or a positive number of seconds/);
  });
});
