import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { readTaskEvents, reusePlan } from '@troupe/client';
import {
  builtinTools,
  type Coordinator,
  factsOf,
  loadPipeline,
  Recording,
  startCoordinator,
} from '@troupe/coordinator';
import {
  BUCKETS,
  type EventOf,
  eventsOf,
  FINAL_EVENT_KINDS,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import { createLogger, defineTool, NatsBus } from '@troupe/runtime';
import { type FakeModelServer, startFakeOpenAI, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type CutAfterWrite, cutAfterWrite } from './support/cutAfterWrite.ts';
import { ofKind, waiter } from './support/harness.ts';

/** Jots a line, keeping each run: a call run twice would show here. */
const jotted: string[] = [];
const jot = defineTool({
  name: 'jot',
  description: 'Jots a line down.',
  input: z.object({ text: z.string() }),
  async run({ text }) {
    jotted.push(text);
    return 'jotted';
  },
});

const pipeline = (baseURL: string) => `version: 1
name: handoff
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${baseURL}" }
defaults: { model: gpt }
agents:
  planner: { instructions: Plan it. }
  executor: { instructions: Do what the plan says., tools: [jot] }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: execute, kind: agent, agent: executor }
`;

/** The same, with a reviewer after the executor. */
const reviewed = (baseURL: string) =>
  pipeline(baseURL)
    .replace('name: handoff', 'name: reviewed')
    .replace('  executor: {', '  reviewer: { instructions: Review it. }\n  executor: {')
    .concat('  - { id: review, kind: agent, agent: reviewer }\n');

/**
 * A step run in the coordinator's own process leaves its final model reply to the workflow's checkpoint rather than
 * the journal. A coordinator cut off from NATS right after that reply (its `llm.response` is the last thing the
 * server gets from it, as after a kill -9) leaves neither the reply nor its checkpoint: the next coordinator asks
 * that model once more, and the step after it, which the first coordinator started meanwhile, ran no tool there
 * (its journal waited for the checkpoint that never came).
 */
describe("kill -9 between a local step's final reply and the checkpoint that records it", () => {
  let nats: TestNats;
  let openai: FakeModelServer;
  let dir: string;
  let client: NatsConnection;
  let proxy: CutAfterWrite;
  const events: TroupeEvent[] = [];
  const { notify, waitFor } = waiter();
  const running: { coordinator: Coordinator; bus: NatsBus }[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    openai = await startFakeOpenAI();
    dir = await mkdtemp(join(tmpdir(), 'troupe-local-final-'));
    await writeFile(join(dir, 'handoff.yaml'), pipeline(openai.baseURL));
    await writeFile(join(dir, 'reviewed.yaml'), reviewed(openai.baseURL));
    client = await connect({ servers: nats.url, name: 'local-final-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        const parsed = eventsOf(msg.data, msg.subject);
        if (parsed.ok) events.push(...parsed.value);
        notify();
      },
    });
    await client.flush();
  }, 60_000);
  afterAll(async () => {
    // The cut-off coordinator still tries to reach NATS; it is let go, not waited for.
    for (const { coordinator, bus } of running.splice(0)) {
      void coordinator.stop().catch(() => undefined);
      void bus.close().catch(() => undefined);
    }
    await proxy?.stop();
    await client?.close();
    await openai?.stop();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const start = async (servers: string, name: string, checkpointLingerMs?: number) => {
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    // Events one by one, so the cut can fall right after the reply's own event.
    const bus = await NatsBus.connect({ servers, name, logger, eventBatch: false });
    const registry = builtinTools();
    registry.register(jot);
    const coordinator = await startCoordinator({
      bus,
      pipelines: await Promise.all(
        ['handoff.yaml', 'reviewed.yaml'].map((file) =>
          loadPipeline(join(dir, file), {
            toolNames: registry.names(),
            env: { OPENAI_API_KEY: 'sk-test' },
          }),
        ),
      ),
      logger,
      workspaceRoot: join(dir, 'workspaces'),
      registry,
      ackWaitMs: 2_000,
      ...(checkpointLingerMs === undefined ? {} : { checkpointLingerMs }),
    });
    running.push({ coordinator, bus });
    return { coordinator, bus };
  };
  const stop = async (started: { coordinator: Coordinator; bus: NatsBus }) => {
    running.splice(running.indexOf(started), 1);
    await started.coordinator.stop();
    await started.bus.close();
  };
  const instructionsOf = (body: { messages?: { role: string; content: unknown }[] }) =>
    JSON.stringify(body.messages?.find((m) => m.role === 'system')?.content ?? '');
  /** The model requests of one agent for the task whose goal is `goal`. */
  const askedOf = (agent: 'Plan it.' | 'Do what the plan says.' | 'Review it.', goal: string) =>
    openai.requests.filter(
      (r) => instructionsOf(r.body).includes(agent) && JSON.stringify(r.body).includes(goal),
    );
  const finalOf = (id: string) =>
    waitFor(
      () => events.find((e) => e.taskId === id && FINAL_EVENT_KINDS.includes(e.kind)),
      `the end of task ${id}`,
      60_000,
    );

  it('asks the planner once more, runs the executor’s tool once, and the history holds the reply the task went on with', async () => {
    const id = 'local-final-1';
    const goal = 'plan, then do it (1)';
    jotted.length = 0;
    const planStep = `${id}.plan.1`;
    proxy = await cutAfterWrite(nats.port, subjects.event('handoff', id, 'llm.response'), (payload) =>
      payload.toString('utf8').includes(`"stepId":"${planStep}"`),
    );
    openai.enqueue(
      { kind: 'message', content: 'Plan: jot "first".' },
      // The executor the cut-off coordinator started: its reply asks for a tool it must not run.
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"first"}' }] },
    );
    await start(proxy.url, 'cut-off-coordinator');
    client.publish(subjects.task('handoff'), JSON.stringify({ id, goal }));

    await proxy.cut;
    // The first coordinator, cut off, went on in memory: it started the executor, whose model was asked.
    await expect.poll(() => askedOf('Do what the plan says.', goal).length, { timeout: 20_000 }).toBe(1);
    expect(askedOf('Plan it.', goal)).toHaveLength(1);

    openai.enqueue(
      { kind: 'message', content: 'Plan: jot "second".' },
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"second"}' }] },
      { kind: 'message', content: 'Jotted "second".' },
    );
    const next = await start(nats.url, 'next-coordinator');
    const { bus } = next;
    const final = await finalOf(id);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    expect((final as EventOf<'task.completed'>).data.output).toBe('Jotted "second".');

    // The planner's final reply was in no journal: asked once more. The executor's tool ran once, on the plan the
    // task went on with; the cut-off coordinator's executor ran none (its journal waited for the checkpoint).
    expect(askedOf('Plan it.', goal)).toHaveLength(2);
    expect(jotted).toEqual(['second']);
    const executorAsked = askedOf('Do what the plan says.', goal);
    expect(executorAsked).toHaveLength(3);
    expect(JSON.stringify(executorAsked[1]?.body)).toContain('Plan: jot \\"second\\".');
    expect(JSON.stringify(executorAsked[1]?.body)).not.toContain('Plan: jot \\"first\\".');

    // The history: both replies of the planner's turn are stored (an `llm.response` id holds the reply's digest),
    // the step's completion is the second one's, and a recording of the task takes the reply the task went on with.
    const stored = await readTaskEvents(bus, id, 'handoff');
    const planReplies = ofKind(stored, 'llm.response').filter((e) => e.data.stepId === planStep);
    expect(planReplies.map((e) => e.data.content)).toEqual(['Plan: jot "first".', 'Plan: jot "second".']);
    const completed = ofKind(stored, 'step.completed').filter((e) => e.data.stepId === planStep);
    expect(completed.map((e) => e.data.output)).toEqual(['Plan: jot "second".']);
    const recording = new Recording(id, stored);
    const turn = recording.turn(planStep, 1);
    expect(turn?.kind === 'reply' ? turn.response.content : turn).toBe('Plan: jot "second".');
    expect(new Set(stored.map((e) => e.id)).size).toBe(stored.length);
    await stop(next);
  }, 120_000);

  it('lets the step after it write nothing and run no tool while the checkpoint is not stored, though the rest of its process reaches NATS', async () => {
    const id = 'local-final-2';
    const goal = 'plan, then do it (2)';
    jotted.length = 0;
    // The checkpoints after the claim (those with a snapshot) are lost on their way; everything else goes through.
    // The cut comes with the second of them (the first tried again), long after an executor that did not wait for it
    // would have recorded its reply and run its tool.
    const withSnapshot = (payload: Buffer) => payload.includes('"snapshot"');
    const held = await cutAfterWrite(
      nats.port,
      `$KV.${BUCKETS.workflows}.${id}`,
      (payload, before) => withSnapshot(payload) && before.some(withSnapshot),
      { hold: withSnapshot },
    );
    openai.enqueue(
      { kind: 'message', content: 'Plan: jot "first".' },
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"first"}' }] },
    );
    const journal = await new Kvm(client).open(BUCKETS.journal);
    await start(held.url, 'held-coordinator');
    client.publish(subjects.task('handoff'), JSON.stringify({ id, goal }));
    await held.cut;
    await held.stop();
    // Its executor was asked, and waited: no reply of it journaled, no tool run, no second call.
    expect(askedOf('Do what the plan says.', goal)).toHaveLength(1);
    expect(jotted).toEqual([]);
    expect(await journal.get(`handoff.${id}.execute.1.1.model`)).toBeNull();
    // What the cut-off process published meanwhile did reach the server: the planner's reply and its step's end.
    expect(ofKind(events, 'llm.response').some((e) => e.data.stepId === `${id}.plan.1`)).toBe(true);

    openai.enqueue(
      { kind: 'message', content: 'Plan: jot "second".' },
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"second"}' }] },
      { kind: 'message', content: 'Jotted "second".' },
    );
    const next = await start(nats.url, 'next-coordinator-2');
    const final = await finalOf(id);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    expect((final as EventOf<'task.completed'>).data.output).toBe('Jotted "second".');
    expect(askedOf('Plan it.', goal)).toHaveLength(2);
    expect(jotted).toEqual(['second']);
    const stored = await readTaskEvents(next.bus, id, 'handoff');
    const planReplies = ofKind(stored, 'llm.response').filter((e) => e.data.stepId === `${id}.plan.1`);
    expect(planReplies.map((e) => e.data.content)).toEqual(['Plan: jot "first".', 'Plan: jot "second".']);
    const turn = new Recording(id, stored).turn(`${id}.plan.1`, 1);
    expect(turn?.kind === 'reply' ? turn.response.content : turn).toBe('Plan: jot "second".');
    // The planner's step ended twice: its first end reached the stream before the cut (published beside the
    // checkpoint write that was lost), and its end with the second answer, the one the task went on with, is stored
    // beside it (a `step.completed` id holds a digest of the outcome), not dropped as the same fact.
    const completed = ofKind(stored, 'step.completed').filter((e) => e.data.stepId === `${id}.plan.1`);
    expect(completed.map((e) => e.data.output)).toEqual(['Plan: jot "first".', 'Plan: jot "second".']);
    // `troupe replay` judges the run by the later end: one step end of the planner.
    const planEnds = factsOf(stored).filter((fact) => fact.kind === 'step end' && fact.step === 'plan');
    expect(planEnds).toEqual([{ kind: 'step end', step: 'plan', ok: true }]);
    // A restart or fork from the executor reuses the planner's later end, though the first is the one stored before
    // the executor first started.
    const reused = reusePlan(stored, { taskId: id, step: 'execute' });
    expect(reused.ok && reused.steps['plan.1']?.output).toBe('Plan: jot "second".');
    await stop(next);
  }, 120_000);
  it('asks the executor once more for its final reply, not its tool, after a crash while its checkpoint is held back behind the reviewer', async () => {
    const id = 'local-final-3';
    const goal = 'plan, do it, review it (3)';
    jotted.length = 0;
    const executeStep = `${id}.execute.1`;
    // The checkpoint that holds the executor's output waits for the next write while the reviewer runs here (a linger
    // long enough that it has not gone by then): the cut comes as the reviewer asks its model.
    proxy = await cutAfterWrite(nats.port, subjects.event('reviewed', id, 'llm.request'), (payload) =>
      payload.toString('utf8').includes(`"stepId":"${id}.review.1"`),
    );
    openai.enqueue(
      { kind: 'message', content: 'Plan: jot "once".' },
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"once"}' }] },
      { kind: 'message', content: 'Jotted "once".' },
      // The reviewer the cut-off coordinator starts, going on in memory.
      { kind: 'message', content: 'Looks right (never recorded).' },
    );
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    await start(proxy.url, 'held-back-coordinator', 60_000);
    client.publish(subjects.task('reviewed'), JSON.stringify({ id, goal }));
    await proxy.cut;
    await expect.poll(() => askedOf('Review it.', goal).length, { timeout: 20_000 }).toBe(1);
    // What the server holds: the planner's output (the executor's journal wrote after it), not the executor's.
    const record = (await workflows.get(id))?.json<{ state: unknown }>();
    expect(JSON.stringify(record?.state)).toContain('execute');
    expect(jotted).toEqual(['once']);

    openai.enqueue(
      { kind: 'message', content: 'Jotted "once", again.' },
      { kind: 'message', content: 'Looks right.' },
    );
    const next = await start(nats.url, 'next-coordinator-3');
    const final = await finalOf(id);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    expect((final as EventOf<'task.completed'>).data.output).toBe('Looks right.');
    // The planner's output was on record: not asked again. The executor's tool call and its result were journaled:
    // replayed, the tool not run again. Its final reply, held back with the checkpoint, is asked for once more.
    expect(askedOf('Plan it.', goal)).toHaveLength(1);
    expect(jotted).toEqual(['once']);
    expect(askedOf('Do what the plan says.', goal)).toHaveLength(3);
    const stored = await readTaskEvents(next.bus, id, 'reviewed');
    const executed = ofKind(stored, 'step.completed').filter((e) => e.data.stepId === executeStep);
    expect(executed.map((e) => e.data.output)).toEqual(['Jotted "once".', 'Jotted "once", again.']);
    const reused = reusePlan(stored, { taskId: id, step: 'review' });
    expect(reused.ok && reused.steps['execute.1']?.output).toBe('Jotted "once", again.');
    await stop(next);
  }, 120_000);
});
