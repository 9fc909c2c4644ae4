import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { EventBatch, FINAL_EVENT_KINDS, parseMessage, subjects, TroupeEvent } from '@troupe/protocol';
import { startTestNats } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

/** What a plain NATS client heard of one task. */
interface Heard {
  /** The kinds of the events each batch held. */
  batches: string[][];
  /** The kinds of the events that came alone, on their own subject. */
  alone: string[];
  /** What a raw subscriber by kind (`troupe.events.demo.*.llm.response`) heard. */
  byKind: number;
}

/**
 * Runs the demo once with `troupe up --no-agents` and a `troupe worker`, each with its own arguments and
 * `TROUPE_EVENT_BATCH`, and says what a plain NATS client heard. The coordinator runs no agent, so the step events
 * (`step.*`) are its own and the model events (`llm.*`) the worker's: each process shows apart from the other.
 */
async function runDemo(
  task: string,
  up: { args: string[]; batchEnv: string },
  worker: { args: string[]; batchEnv: string },
): Promise<Heard> {
  const nats = await startTestNats();
  const home = await mkdtemp(join(tmpdir(), 'troupe-batch-flag-'));
  const client = await connect({ servers: nats.url });
  const demo = examplePath('demo.yaml');
  const heard: Heard = { batches: [], alone: [], byKind: 0 };
  const processes: CliProcess[] = [];
  try {
    const upProcess = startTroupe(
      ['up', demo, '--no-agents', ...up.args, '--home', home],
      cliEnv({ NATS_URL: nats.url, TROUPE_EVENT_BATCH: up.batchEnv }),
    );
    processes.push(upProcess);
    await upProcess.waitFor(/troupe is up on/, 60_000);
    const workerProcess = startTroupe(
      ['worker', demo, ...worker.args, '--home', home],
      cliEnv({ NATS_URL: nats.url, TROUPE_EVENT_BATCH: worker.batchEnv }),
    );
    processes.push(workerProcess);
    await workerProcess.waitFor(/serving/, 60_000);
    client.subscribe(subjects.event('demo', task, 'llm.response'), {
      callback: () => {
        heard.byKind += 1;
      },
    });
    const ended = new Promise<void>((resolve) => {
      client.subscribe(subjects.taskEvents(task, 'demo'), {
        callback: (_error, msg) => {
          const batch = parseMessage(EventBatch, msg.data);
          if (batch.ok) {
            heard.batches.push(batch.value.events.map((event) => event.kind));
            return;
          }
          const one = parseMessage(TroupeEvent, msg.data);
          if (!one.ok) return;
          heard.alone.push(one.value.kind);
          if (FINAL_EVENT_KINDS.includes(one.value.kind)) resolve();
        },
      });
    });
    await client.flush();
    client.publish(subjects.task('demo'), JSON.stringify({ id: task, goal: 'write a hello note' }));
    await ended;
    return heard;
  } finally {
    for (const p of processes.reverse()) await p.stop();
    await client.close();
    await nats.stop();
    await rm(home, { recursive: true, force: true });
  }
}

describe('how troupe up and troupe worker send their events', () => {
  it('in batches by default: each process its own, with no flag and TROUPE_EVENT_BATCH unset', async () => {
    const heard = await runDemo('batched-1', { args: [], batchEnv: '' }, { args: [], batchEnv: '' });
    expect(heard.alone).toContain('task.completed');
    // troupe up's step events, and the worker's model events, went in batches (one gathered alone goes alone).
    expect(heard.batches.flat().filter((kind) => kind.startsWith('step.'))).not.toEqual([]);
    expect(heard.batches.flat().filter((kind) => kind.startsWith('llm.'))).not.toEqual([]);
    // A raw subscriber by kind hears only those that went alone: why batching can be turned off.
    expect(heard.byKind).toBe(heard.alone.filter((kind) => kind === 'llm.response').length);
  }, 150_000);

  it('each alone on its own subject with troupe up --no-event-batch and the worker’s TROUPE_EVENT_BATCH=0', async () => {
    const heard = await runDemo(
      'alone-1',
      { args: ['--no-event-batch'], batchEnv: '' },
      { args: [], batchEnv: '0' },
    );
    expect(heard.batches).toEqual([]);
    expect(heard.alone).toContain('step.started');
    expect(heard.alone).toContain('step.completed');
    expect(heard.alone).toContain('llm.request');
    expect(heard.byKind).toBe(heard.alone.filter((kind) => kind === 'llm.response').length);
    expect(heard.byKind).toBeGreaterThan(0);
  }, 150_000);

  it('refuses a TROUPE_EVENT_BATCH that is neither 0 nor 1 before it starts anything', async () => {
    for (const command of ['up', 'worker']) {
      const result = await troupe(
        [command, examplePath('demo.yaml'), '--server', 'nats://127.0.0.1:1'],
        cliEnv({ TROUPE_EVENT_BATCH: 'no' }),
      );
      expect(result.code, command).toBe(2);
      expect(result.stderr, command).toMatch(/TROUPE_EVENT_BATCH must be 0 .* or 1 .*, not "no"/);
    }
  });
});
