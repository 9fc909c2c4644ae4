import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';
import { seededRandom } from './support/seed.ts';
import { messageStorm } from './support/storm.ts';

describe('faults that must not outlive their task or take the process down', () => {
  let h: Harness;
  let model: FakeModelServer;
  let dir: string;
  const lines: string[] = [];

  beforeAll(async () => {
    model = await startFakeOpenAI();
    dir = await mkdtemp(join(tmpdir(), 'troupe-robustness-'));
    // A step whose model answers after the step timeout, with a tool call that would write a file.
    const timeboxed = join(dir, 'timeboxed.yaml');
    await writeFile(
      timeboxed,
      `version: 1
name: timeboxed
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${model.baseURL}" }
defaults: { model: gpt, stepTimeout: 1 }
agents:
  writer: { instructions: Write late., tools: [write_file] }
flow:
  - { id: write, kind: agent, agent: writer }
`,
    );
    h = await startHarness([timeboxed, fixturePath('garbled.yaml'), fixturePath('slow.yaml')], {
      env: { OPENAI_API_KEY: 'sk-test-robustness' },
      logLines: lines,
      // Every step over NATS: the timeout test learns the agent's run is over from its host's logged reply, and a step
      // run in-process sends none (apps/coordinator/test/localStep.test.ts times out a step run in-process).
      maxLocalSteps: 0,
    });
  });
  afterAll(async () => {
    await h?.stop();
    await model?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('stops an agent whose step timed out: nothing it would have done afterwards happens', async () => {
    model.enqueue(
      {
        kind: 'message',
        toolCalls: [
          { name: 'write_file', arguments: JSON.stringify({ path: 'too-late.md', content: 'late' }) },
        ],
        delayMs: 1_500,
      },
      { kind: 'message', content: 'wrote it' },
    );
    publishTask(h, 'timeboxed', { id: 'late-1', goal: 'write late' });
    const final = await h.finalOf('late-1');
    expect(final.kind).toBe('task.failed');
    expect(final.kind === 'task.failed' && final.data.message).toContain('within the step timeout');
    // The model's answer was due 0.5 s after the timeout. The agent hung up on it, so it can never come; and its
    // host answered the workflow, which it does once the agent's run is over.
    await waitUntil(() => model.abandoned.length === 1, 'the model call to be cancelled');
    await waitUntil(
      () =>
        lines.some(
          (l) =>
            l.includes('"taskId":"late-1"') &&
            l.includes('"kind":"agent.reply"') &&
            l.includes('"dir":"out"'),
        ),
      "the host's answer for the stopped step",
    );
    expect(model.requests).toHaveLength(1);
    expect(kinds(h.eventsOf('late-1'))).not.toContain('tool.result');
    await expect(stat(join(h.workspaceRoot, 'timeboxed', 'late-1', 'too-late.md'))).rejects.toThrow();
  });

  it('survives an event that cannot be made, ends that task, and keeps serving others', async () => {
    publishTask(h, 'garbled', { id: 'garbled-1', goal: 'talk' });
    const final = await h.finalOf('garbled-1');
    expect(['task.completed', 'task.failed']).toContain(final.kind);
    publishTask(h, 'slow', { id: 'after-garble', goal: 'still here' });
    expect((await h.finalOf('after-garble')).kind).toBe('task.completed');
  });
});

describe('a storm of random and malformed messages on every subject Troupe listens to', () => {
  let h: Harness;
  const { seed, random } = seededRandom('message storm');

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  const { pick, payloads, subjectsHeard } = messageStorm(random);

  it('keeps every process serving: valid tasks sent after it complete', async () => {
    const started = Date.now();
    let sent = 0;
    // Bounded in count and in time, whichever comes first.
    while (sent < 3_000 && Date.now() - started < 20_000) {
      const subject = pick(subjectsHeard)();
      const payload = pick(payloads)();
      if (random() < 0.3) {
        // Asking for a reply: every such message is answered or times out on the asker's side, never crashes.
        h.client.request(subject, payload, { timeout: 200 }).catch(() => undefined);
      } else {
        h.client.publish(subject, payload);
      }
      sent += 1;
      if (sent % 200 === 0) await h.client.flush();
    }
    await h.client.flush();
    const valid = ['after-storm-1', 'after-storm-2', 'after-storm-3'];
    for (const id of valid) publishTask(h, 'demo', { id, goal: 'write a hello note' });
    for (const id of valid) {
      expect((await h.finalOf(id, 60_000)).kind, `seed ${seed}`).toBe('task.completed');
    }
    expect(h.invalid.length, `seed ${seed}`).toBeGreaterThan(0);
    console.info(
      `message storm: ${sent} messages in ${Date.now() - started} ms, ${h.invalid.length} reports (seed ${seed})`,
    );
  }, 120_000);
});
