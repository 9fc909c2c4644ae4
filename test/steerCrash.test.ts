import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import {
  AgentStepRequest,
  BUCKETS,
  type ControlReceipt,
  type ErrorReply,
  FINAL_EVENT_KINDS,
  subjects,
  type WorkflowRecord,
} from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import { facts, fixturePath, ofKind, waiter } from './support/harness.ts';
import { type ModelPipeline, startModelPipeline } from './support/modelPipeline.ts';
import { type KillTestServer, startKillTestServer } from './support/natsUsers.ts';
import { runningRecord } from './support/taskRecord.ts';
import { type UpProcesses, upProcesses } from './support/upProcesses.ts';

/**
 * Pause, resume and tell across a coordinator killed with SIGKILL, on one nats-server for the file (each part's
 * coordinators run their own pipeline, in a home of their own).
 */
let server: KillTestServer;
const { notify, waitFor: until } = waiter();

beforeAll(async () => {
  server = await startKillTestServer(fixturePath('confirming.yaml'), false, 'steer-crash-test', notify);
});
afterAll(async () => {
  await server?.stop();
});

const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
/** Sends a control message as any NATS client can, and answers with the coordinator's reply. */
const control = async (taskId: string, message: Record<string, unknown>) =>
  (await server.client.request(subjects.control(taskId), JSON.stringify(message), { timeout: 15_000 })).json<
    ControlReceipt | ErrorReply
  >();

/** The ack wait `upProcesses` gives each coordinator (`--ack-wait 2`). */
const ACK_WAIT_MS = 2_000;

/**
 * The keep-alives (`+WPI`) coordinators send the server for the task message stored at `seq`, as a plain subscriber
 * on the acknowledgement subjects hears them: when each came, and the delivery it renews (1 for the first, 2 for the
 * first redelivery, …).
 */
function keepAlivesOf(seq: number): { heard: { at: number; delivered: number }[]; stop(): void } {
  const heard: { at: number; delivered: number }[] = [];
  const subscription = server.client.subscribe('$JS.ACK.>', {
    callback: (_error, msg) => {
      if (msg.string() !== '+WPI') return;
      // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…; the newer form has two more tokens after ACK.
      const tokens = msg.subject.split('.');
      const at = tokens.length >= 12 ? 4 : 2;
      if (Number(tokens[at + 3]) !== seq) return;
      heard.push({ at: Date.now(), delivered: Number(tokens[at + 2]) });
    },
  });
  return { heard, stop: () => subscription.unsubscribe() };
}

/** How long the keep-alives heard cover, from the first to the last; 0 for fewer than two. */
const spanOf = (heard: readonly { at: number }[]) =>
  heard.length < 2 ? 0 : (heard.at(-1)?.at ?? 0) - (heard[0]?.at ?? 0);

/**
 * The pause and the message are recorded before their receipts, so the coordinator that gets the task again holds it
 * (no model call while it is held) and gives the message to the next step exactly once.
 */
describe('pause, resume and tell across kill -9', () => {
  let home: string;
  let coordinators: UpProcesses;
  /** The step requests sent to the shipper, as a plain subscriber beside the queue group sees them. */
  const shipperSteps: AgentStepRequest[] = [];

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-paused-'));
    // Every step over NATS (--no-local-steps): this part reads the told messages each step request carries as a
    // plain subscriber beside the queue group sees them, and a step run in-process sends no request.
    coordinators = upProcesses(fixturePath('confirming.yaml'), server.nats.url, home, cliEnv(), [
      '--no-local-steps',
    ]);
    server.client.subscribe(subjects.agent('confirming', 'shipper'), {
      callback: (_error, msg) => {
        shipperSteps.push(AgentStepRequest.parse(msg.json()));
        notify();
      },
    });
    await server.client.flush();
  });
  afterAll(async () => {
    await coordinators?.stopAll('SIGKILL');
    await rm(home, { recursive: true, force: true });
  });

  const recordOf = async (taskId: string) =>
    (await (await new Kvm(server.client).open(BUCKETS.workflows)).get(taskId))?.json<WorkflowRecord>();
  const revisionOf = async (taskId: string) =>
    (await (await new Kvm(server.client).open(BUCKETS.workflows)).get(taskId))?.revision;
  const modelCalls = (taskId: string, step: string) =>
    ofKind(eventsOf(taskId), 'llm.request').filter((e) => e.data.stepId.startsWith(`${taskId}.${step}.`));

  it('keeps a paused task held through a kill, takes the answer given meanwhile, and runs on only after resume', async () => {
    await coordinators.up();
    const { seq } = await jetstream(server.client).publish(
      subjects.task('confirming'),
      JSON.stringify({ id: 'held-1', goal: 'Release 2.0' }),
      { msgID: 'held-1' },
    );
    const { heard: keepAlives, stop: stopHearing } = keepAlivesOf(seq);
    const question = await until(() => ofKind(eventsOf('held-1'), 'human.asked')[0], 'the question');

    expect(await control('held-1', { action: 'pause', by: 'ann', reason: 'check the notes' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'paused',
    });
    expect(await control('held-1', { action: 'tell', text: 'ship it quietly' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'told',
      messageId: 'm-1',
    });
    expect((await recordOf('held-1'))?.paused).toMatchObject({ by: 'ann', reason: 'check the notes' });
    await coordinators.stopAll('SIGKILL');

    // Answered while no coordinator runs: the answer is kept, and the task holds at its next agent step.
    const answered = await troupe(
      ['answer', question.data.questionId, '{"ship": true}', '--server', server.nats.url],
      cliEnv(),
    );
    expect(answered.code).toBe(0);
    await coordinators.up();
    await until(() => ofKind(eventsOf('held-1'), 'task.resumed')[0], 'the task to resume', 60_000);
    await expect
      .poll(async () => (await recordOf('held-1'))?.state, { timeout: 30_000, interval: 100 })
      .toBe('ship');
    expect((await recordOf('held-1'))?.paused).toMatchObject({ by: 'ann' });
    // A round trip through the coordinator holding it: it runs the task, and still sends nothing.
    expect(await control('held-1', { action: 'pause' })).toMatchObject({
      ok: false,
      error: { code: 'already_paused' },
    });
    expect(modelCalls('held-1', 'ship')).toHaveLength(0);
    expect(shipperSteps).toHaveLength(0);

    // Held over time, not only at that moment: through a whole ack wait of the coordinator holding it, it keeps the
    // delivery alive (the server delivers it to nobody again), sends no step, calls no model and writes no record.
    const heard = keepAlives.length;
    const revision = await revisionOf('held-1');
    await expect
      .poll(() => spanOf(keepAlives.slice(heard)), { timeout: 30_000, interval: 100 })
      .toBeGreaterThanOrEqual(ACK_WAIT_MS);
    const renewed = keepAlives.slice(heard);
    // One delivery renewed throughout, the one the restored coordinator got after the kill: none came after it.
    expect(new Set(renewed.map((k) => k.delivered)).size).toBe(1);
    expect(renewed[0]?.delivered).toBeGreaterThanOrEqual(2);
    expect(ofKind(facts(eventsOf('held-1')), 'task.resumed')).toHaveLength(1);
    expect(await revisionOf('held-1')).toBe(revision);
    expect((await recordOf('held-1'))?.paused).toMatchObject({ by: 'ann' });
    expect(modelCalls('held-1', 'ship')).toHaveLength(0);
    expect(shipperSteps).toHaveLength(0);
    stopHearing();

    expect(await control('held-1', { action: 'resume', by: 'bob' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'resumed',
    });
    const final = await until(
      () => eventsOf('held-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'held-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Release is shipped.' } });
    // As facts: the restored task published its pause and unread message again, under the ids they had.
    const mine = facts(eventsOf('held-1'));
    expect(ofKind(mine, 'task.resumed').map((e) => e.data.after ?? 'redelivery')).toEqual([
      'redelivery',
      'pause',
    ]);
    expect(ofKind(mine, 'task.paused')).toHaveLength(1);
    expect(ofKind(mine, 'task.told').map((e) => e.data)).toEqual([
      { messageId: 'm-1', text: 'ship it quietly' },
    ]);
    // The draft ran once, before the pause; the ship step once, after the resume, told the message once.
    expect(modelCalls('held-1', 'draft')).toHaveLength(1);
    expect(modelCalls('held-1', 'ship')).toHaveLength(1);
    expect(shipperSteps.map((s) => s.told?.map((m) => m.text))).toEqual([['ship it quietly']]);
    expect(ofKind(mine, 'human.asked')).toHaveLength(1);

    // Every operation on a finished or unknown task is refused, saying so.
    for (const action of [{ action: 'pause' }, { action: 'resume' }, { action: 'tell', text: 'late' }]) {
      expect(await control('held-1', action)).toEqual({
        ok: false,
        error: {
          code: 'task_ended',
          message: 'task held-1 has already ended: completed; nothing was changed',
        },
      });
      expect(await control('never-was', action)).toEqual({
        ok: false,
        error: { code: 'unknown_task', message: 'no task never-was is known' },
      });
    }
  });

  it('tells the sender of a pause, resume or tell for a task nobody runs that nothing was changed, and that it is paused', async () => {
    const workflows = await new Kvm(server.client).open(BUCKETS.workflows);
    const now = new Date().toISOString();
    const record = runningRecord('orphan-held', 'confirming', {
      streamSequence: 999_999,
      state: 'ship',
      goal: 'lost',
      createdAt: now,
      updatedAt: now,
      paused: { since: now, by: 'ann' },
    });
    await workflows.put('orphan-held', JSON.stringify(record));
    if (coordinators.count() === 0) await coordinators.up();
    const reply = await control('orphan-held', { action: 'tell', text: 'hello' });
    expect(reply).toMatchObject({ ok: false, error: { code: 'not_running' } });
    const message = reply.ok ? '' : reply.error.message;
    expect(message).toContain('nothing was changed');
    expect(message).toContain(`it is paused (since ${now})`);
    expect(message).toContain('try again once it runs');
    // The same on the pipeline's steering subject, where people who may only steer send it.
    const steered = (
      await server.client.request(
        subjects.steer('confirming', 'orphan-held'),
        JSON.stringify({ action: 'resume' }),
        {
          timeout: 15_000,
        },
      )
    ).json<ErrorReply>();
    expect(steered.error.code).toBe('not_running');
    expect(steered.error.message).toContain(`it is paused (since ${now})`);
  });
});

const TOLD = 'use the v2 API, not v1';

/**
 * A person's message told while a tool call runs, with a real agent host (the one `troupe up` runs) and a model
 * behind the real OpenAI client (a wire-faithful fake that keeps every request): the agent's next model call has the
 * message, once, and after a kill -9 of the coordinator (and its host) the step's next run puts it at the same turn
 * of the conversation, so no later call has it twice, or lacks it.
 */
describe('tell across kill -9, with a real agent host', () => {
  let teller: ModelPipeline;
  let openai: ModelPipeline['openai'];
  let coordinators: UpProcesses;

  beforeAll(async () => {
    teller = await startModelPipeline(
      'teller',
      `agents:
  clerk:
    instructions: Do the work.
    tools: [run_command]
    permissions: [{ tool: run_command, decision: allow, commands: [echo, sleep] }]
flow:
  - { id: work, kind: agent, agent: clerk }
`,
    );
    openai = teller.openai;
    coordinators = upProcesses(
      teller.file,
      server.nats.url,
      join(teller.dir, 'home'),
      cliEnv({ OPENAI_API_KEY: 'sk-test' }),
    );
  });
  afterAll(async () => {
    await coordinators?.stopAll('SIGKILL');
    await teller?.stop();
  });

  /** How many times the told message is in the messages of the model request at `index`. */
  const toldIn = (index: number): number => teller.sent(index).split(TOLD).length - 1;

  it('a message told while a tool call runs is read by the next model call exactly once, across a crash', async () => {
    await coordinators.up();
    openai.enqueue(
      {
        kind: 'message',
        toolCalls: [{ name: 'run_command', arguments: '{"command":"echo first && sleep 2"}' }],
      },
      {
        kind: 'message',
        toolCalls: [{ name: 'run_command', arguments: '{"command":"echo second && sleep 5"}' }],
      },
    );
    server.client.publish(subjects.task('teller'), JSON.stringify({ id: 'told-1', goal: 'do it' }));
    await until(() => ofKind(eventsOf('told-1'), 'tool.call')[0], 'the first tool call');

    expect(await control('told-1', { action: 'tell', text: TOLD, by: 'ann' })).toEqual({
      ok: true,
      taskId: 'told-1',
      outcome: 'told',
      messageId: 'm-1',
    });

    // The next model call reads it (journaled under its turn first), then asks for a second, long tool call.
    await until(() => ofKind(eventsOf('told-1'), 'tool.call')[1], 'the second tool call', 30_000);
    expect(openai.requests).toHaveLength(2);
    expect(toldIn(0)).toBe(0);
    expect(toldIn(1)).toBe(1);
    expect(ofKind(eventsOf('told-1'), 'agent.told')[0]?.data).toMatchObject({ messageIds: ['m-1'], turn: 2 });

    // Killed mid-call: the resumed step replays both model replies from its journal, the message at turn 2.
    await coordinators.stopAll('SIGKILL');
    openai.enqueue({ kind: 'message', content: 'done, on v2' });
    await coordinators.up();
    const final = await until(
      () => eventsOf('told-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'told-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'done, on v2' } });
    // One more model call in all, with the message once, where it was.
    expect(openai.requests).toHaveLength(3);
    expect(toldIn(2)).toBe(1);
    const messages = teller.sent(2);
    expect(messages.indexOf(TOLD)).toBeLessThan(messages.indexOf('echo second'));
    expect(messages.indexOf(TOLD)).toBeGreaterThan(messages.indexOf('echo first'));
    // One fact, published again under its id by the restored task (its unread message, kept by the record).
    expect(ofKind(facts(eventsOf('told-1')), 'task.told')).toHaveLength(1);
  });

  it('a message told just before a kill, read by no call yet, is read by the next model call of the resumed step once', async () => {
    await coordinators.up();
    const before = openai.requests.length;
    openai.enqueue({
      kind: 'message',
      toolCalls: [{ name: 'run_command', arguments: '{"command":"echo only && sleep 5"}' }],
    });
    server.client.publish(subjects.task('teller'), JSON.stringify({ id: 'told-2', goal: 'do it' }));
    await until(() => ofKind(eventsOf('told-2'), 'tool.call')[0], 'the tool call');
    expect(await control('told-2', { action: 'tell', text: TOLD })).toMatchObject({
      ok: true,
      outcome: 'told',
      messageId: 'm-1',
    });
    // Killed while the tool call runs: the message is in the task's record only, no agent has read it.
    await coordinators.stopAll('SIGKILL');
    expect(ofKind(eventsOf('told-2'), 'agent.told')).toHaveLength(0);

    openai.enqueue({ kind: 'message', content: 'done, on v2' });
    await coordinators.up();
    const final = await until(
      () => eventsOf('told-2').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'told-2 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'done, on v2' } });
    expect(openai.requests.length - before).toBe(2);
    expect(toldIn(before)).toBe(0);
    expect(toldIn(before + 1)).toBe(1);
  });

  it('a step paused during a tool call stops after it, holds with no model call, and goes on from its journal on resume', async () => {
    if (coordinators.count() === 0) await coordinators.up();
    const before = openai.requests.length;
    openai.enqueue(
      {
        kind: 'message',
        toolCalls: [{ name: 'run_command', arguments: '{"command":"echo once && sleep 2"}' }],
      },
      { kind: 'message', content: 'done after the pause' },
    );
    server.client.publish(subjects.task('teller'), JSON.stringify({ id: 'paused-1', goal: 'do it' }));
    await until(() => ofKind(eventsOf('paused-1'), 'tool.call')[0], 'the tool call');
    expect(await control('paused-1', { action: 'pause', by: 'ann' })).toMatchObject({
      ok: true,
      outcome: 'paused',
    });
    // The tool call finishes; the host stops at the boundary and replies paused: no second model call.
    await until(() => ofKind(eventsOf('paused-1'), 'tool.result')[0], 'the tool result', 30_000);
    expect(await control('paused-1', { action: 'pause' })).toMatchObject({
      ok: false,
      error: { code: 'already_paused' },
    });
    expect(openai.requests.length - before).toBe(1);

    expect(await control('paused-1', { action: 'resume' })).toMatchObject({ ok: true, outcome: 'resumed' });
    const final = await until(
      () => eventsOf('paused-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'paused-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'done after the pause' } });
    expect(openai.requests.length - before).toBe(2);
    const calls = new Set(ofKind(eventsOf('paused-1'), 'tool.call').map((e) => e.data.callId));
    expect(calls.size).toBe(1);
  });
});
