import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { EventBatch, FINAL_EVENT_KINDS, parseMessage, subjects, TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

const TASK = 'flag-batched-1';

/**
 * `troupe up --event-batch` and `troupe worker --event-batch`, with `TROUPE_EVENT_BATCH` unset: each process sends
 * its own events of the task in batches. The coordinator runs no agent (`--no-agents`), so the step events in a batch
 * (`step.*`) are its own and the model events (`llm.*`) the worker's: each flag shows apart from the other.
 */
describe('troupe up and troupe worker with --event-batch', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let home: string;
  let up: CliProcess;
  let worker: CliProcess;
  /** The kinds of the events each batch of the task held. */
  const batches: string[][] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    home = await mkdtemp(join(tmpdir(), 'troupe-batch-flag-'));
    client = await connect({ servers: nats.url });
    // The flag alone turns batching on: the variable is unset, whatever this process's environment says.
    const env = cliEnv({ NATS_URL: nats.url, TROUPE_EVENT_BATCH: '' });
    const demo = examplePath('demo.yaml');
    up = startTroupe(['up', demo, '--no-agents', '--event-batch', '--home', home], env);
    await up.waitFor(/troupe is up on/, 60_000);
    worker = startTroupe(['worker', demo, '--event-batch', '--home', home], env);
    await worker.waitFor(/serving/, 60_000);
    client.subscribe(subjects.eventBatch('demo', TASK), {
      callback: (_error, msg) => {
        const parsed = parseMessage(EventBatch, msg.data);
        if (parsed.ok) batches.push(parsed.value.events.map((event) => event.kind));
      },
    });
    const ended = new Promise<string>((resolve) => {
      client.subscribe(subjects.taskEvents(TASK, 'demo'), {
        callback: (_error, msg) => {
          const parsed = parseMessage(TroupeEvent, msg.data);
          if (parsed.ok && FINAL_EVENT_KINDS.includes(parsed.value.kind)) resolve(parsed.value.kind);
        },
      });
    });
    await client.flush();
    client.publish(subjects.task('demo'), JSON.stringify({ id: TASK, goal: 'write a hello note' }));
    expect(await ended).toBe('task.completed');
  }, 150_000);

  afterAll(async () => {
    await worker?.stop();
    await up?.stop();
    await client?.close();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('troupe up sends its step events in batches', () => {
    expect(batches.flat().filter((kind) => kind.startsWith('step.'))).not.toEqual([]);
  });

  it('troupe worker sends its model events in batches', () => {
    expect(batches.flat().filter((kind) => kind.startsWith('llm.'))).not.toEqual([]);
  });
});
