import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import {
  AgentStepReply,
  type AgentStepRequest,
  DecisionReceipt,
  type EventData,
  type EventKind,
  type HumanRequest,
  subjects,
} from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { NatsHumanGate } from '../../src/approvals/humanGate.ts';
import { underPrefix } from '../../src/durable/kvStore.ts';
import { JournalEntry, StepJournal } from '../../src/durable/stepJournal.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

const APPROVAL_MS = 60_000;
const HOUR = 3_600_000;
const silent = createLogger({ level: 'silent' });
const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
const writeCall: ToolCall = { id: 'call-1', name: 'write_note', arguments: '{"text":"hello"}' };

/** A model that asks for `write_note` once, then says what the tool told it. */
function noteModel() {
  const asked: ModelRequest[] = [];
  const model: ModelProvider = {
    provider: 'scripted-here',
    model: 'note-1',
    complete: async (request): Promise<ModelResponse> => {
      asked.push(request);
      const last = request.messages.at(-1)?.content ?? '';
      const first = asked.length === 1;
      return {
        content: first ? '' : `tool said: ${last}`,
        toolCalls: first ? [writeCall] : [],
        usage: { inputTokens: 10, outputTokens: 2, cachedTokens: 0 },
        finishReason: first ? 'tool_calls' : 'stop',
        model: 'note-1',
      };
    },
  };
  return { model, asked };
}

describe('an approval asked in an agent step while its task is paused (in-memory bus and KV, simulated clock)', () => {
  let root: string;
  let clock: SimulatedClock;
  let bus: MemoryBus;
  let approvals: MemoryKv<HumanRequest>;
  let hosts: AgentHost[];
  let written: string[];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-held-approval-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    approvals = new MemoryKv<HumanRequest>();
    hosts = [];
    written = [];
  });
  afterEach(async () => {
    await Promise.all(hosts.map((host) => host.stop()));
  });

  const journal = new MemoryKv(JournalEntry);
  /** A host of agent `worker`, whose `write_note` calls a person must allow; a gate of its own, as each process has. */
  function startHost(model: ModelProvider) {
    const registry = new ToolRegistry();
    registry.register({
      name: 'write_note',
      description: 'Writes a note.',
      input: z.object({ text: z.string() }),
      run: async ({ text }: { text: string }) => {
        written.push(text);
        return `wrote ${text}`;
      },
    });
    const gate = new NatsHumanGate({
      bus,
      store: approvals,
      events: new EventFactory(clock),
      clock,
      logger: silent,
      timeoutMs: HOUR,
    });
    const host = startAgentHost({
      bus,
      pipeline: 'held',
      agents: [
        {
          name: 'worker',
          instructions: 'Work.',
          model,
          tools: ['write_note'],
          rules: [{ tool: 'write_note', decision: 'ask' }] as AgentDefinition['rules'],
          maxTurns: 5,
          approvalTimeoutMs: APPROVAL_MS,
        },
      ],
      registry,
      workspaceRoot: root,
      logger: silent,
      clock,
      journal: new StepJournal(journal),
      human: gate,
    });
    hosts.push(host);
    return { host, gate };
  }

  /** Sends the step; `sentAt`: when its workflow sent it (now unless it was on its way). */
  function sendStep(stepId: string, sentAt = clock.now()) {
    const received: unknown[] = [];
    const request: AgentStepRequest = {
      stepId,
      taskId: stepId.split('.')[0] ?? stepId,
      pipeline: 'held',
      agent: 'worker',
      step: 'work',
      round: 1,
      goal: 'write a note',
      context: [],
      expect: 'text',
      sentAt,
    };
    bus.requestReplies(subjects.agent('held', 'worker'), request, (message) => {
      if (message.ok) received.push(JSON.parse(new TextDecoder().decode(message.data)));
    });
    return () => received.map((m) => AgentStepReply.safeParse(m)).find((r) => r.success)?.data;
  }

  const events = new EventFactory({ now: () => clock.now() });
  async function publish<K extends EventKind>(kind: K, taskId: string, data: z.input<(typeof EventData)[K]>) {
    await bus.publishEvent(events.make(kind, { pipeline: 'held', taskId, traceparent }, data));
    await bus.settled();
  }
  const pause = (taskId: string) =>
    publish('task.paused', taskId, {
      state: 'work',
      round: 1,
      by: 'ann',
      since: new Date(clock.now()).toISOString(),
    });
  /** A resume; `since`: of the pause that began then (a late one of an earlier pause, say). */
  const resume = (taskId: string, since?: number) =>
    publish('task.resumed', taskId, {
      state: 'work',
      round: 1,
      deliveries: 1,
      after: 'pause',
      by: 'ann',
      ...(since === undefined ? {} : { since: new Date(since).toISOString() }),
    });

  /** The pipeline's requests (keys without the pipeline), as the gate keeps them. */
  const stored = async (id: string) => (await underPrefix(approvals, 'held').get(id))?.value;
  /** The one request recorded, once it is. */
  async function theRequest(): Promise<HumanRequest> {
    await expect.poll(async () => (await approvals.keys()).length).toBe(1);
    const [key] = await approvals.keys();
    return (await approvals.get(key as string))?.value as HumanRequest;
  }
  /** A person's decision, as `troupe approve` or the gateway sends it to the waiting step. */
  const decide = (request: HumanRequest, decision: 'allow' | 'deny') =>
    bus.request(
      subjects.approval('held', request.taskId, request.id),
      { decision, by: 'bo' },
      DecisionReceipt,
      { timeoutMs: 1_000 },
    );

  it('does not run out while paused; answered while paused, the step goes on after resume with the approval', async () => {
    const { model, asked } = noteModel();
    startHost(model);
    const first = sendStep('a1.work.1');
    const request = await theRequest();
    expect(request.status).toBe('pending');
    clock.advance(20_000);
    await pause('a1');
    await expect
      .poll(async () => (await stored(request.id))?.held)
      .toEqual({
        since: new Date(clock.now()).toISOString(),
        leftMs: APPROVAL_MS - 20_000,
      });
    // Far past its 60 s while paused: still pending, still answerable.
    clock.advance(HOUR);
    await bus.settled();
    expect((await stored(request.id))?.status).toBe('pending');
    expect(bus.eventsOf('approval.decided')).toHaveLength(0);
    await expect(decide(request, 'allow')).resolves.toMatchObject({ ok: true, outcome: 'allow' });
    // The allowed call runs; the step stops at its next call boundary, paused.
    await expect.poll(() => first()).toMatchObject({ ok: false, error: { code: 'paused' } });
    expect(written).toEqual(['hello']);
    expect(bus.eventsOf('approval.decided')[0]?.data).toMatchObject({ decision: 'allow', by: 'bo' });
    // Decided, it is no longer held (the resume's let-go loses to the decision, so nothing else would drop it).
    const decided = await stored(request.id);
    expect(decided?.status).toBe('allowed');
    expect(decided?.held).toBeUndefined();

    await resume('a1');
    const again = sendStep('a1.work.1');
    await expect.poll(() => again()).toMatchObject({ ok: true, output: 'tool said: wrote hello' });
    expect(written).toEqual(['hello']);
    expect(asked).toHaveLength(2);
  });

  it('has, after resume, exactly the time it had left when paused, and is answerable within it', async () => {
    const { model } = noteModel();
    startHost(model);
    const first = sendStep('a2.work.1');
    const request = await theRequest();
    clock.advance(45_000);
    await pause('a2');
    clock.advance(2 * HOUR);
    await bus.settled();
    await resume('a2');
    // Its new expiry is published where the old one was: the resume plus the 15 s it had left.
    const resumedAt = clock.now();
    await expect
      .poll(async () => await stored(request.id))
      .toMatchObject({ status: 'pending', expiresAt: new Date(resumedAt + 15_000).toISOString() });
    expect((await stored(request.id))?.held).toBeUndefined();
    clock.advance(15_000 - 1);
    await bus.settled();
    expect(first()).toBeUndefined();
    expect(bus.eventsOf('approval.decided')).toHaveLength(0);
    await expect(decide(request, 'allow')).resolves.toMatchObject({ ok: true, outcome: 'allow' });
    // The allowed call runs; the run the pause reached stops at its next call boundary, and goes on sent again.
    await expect.poll(() => first()).toMatchObject({ ok: false, error: { code: 'paused' } });
    expect(written).toEqual(['hello']);
    const again = sendStep('a2.work.1');
    await expect.poll(() => again()).toMatchObject({ ok: true, output: 'tool said: wrote hello' });
    expect(written).toEqual(['hello']);
  });

  it('stays held when its host dies while paused; the run that takes it up after the resume lets it go with the time left', async () => {
    const { model } = noteModel();
    const dying = startHost(model);
    sendStep('a4.work.1');
    const request = await theRequest();
    clock.advance(50_000);
    await pause('a4');
    await expect.poll(async () => (await stored(request.id))?.held?.leftMs).toBe(10_000);
    // The host goes away (its gate leaves the request pending, as a stopping host's does).
    dying.gate.detach();
    await dying.host.stop();
    clock.advance(HOUR);
    await resume('a4');
    clock.advance(5_000);
    // Another host runs the step sent again: it takes the request up, held, and gives it its 10 s from now.
    startHost(model);
    const again = sendStep('a4.work.1');
    const takenUpAt = clock.now();
    await expect
      .poll(async () => await stored(request.id))
      .toMatchObject({ status: 'pending', expiresAt: new Date(takenUpAt + 10_000).toISOString() });
    expect((await stored(request.id))?.held).toBeUndefined();
    // The same request: announced again by the host that took it up, under the same event id.
    expect(new Set(bus.eventsOf('approval.requested').map((e) => e.id)).size).toBe(1);
    await expect(decide(request, 'allow')).resolves.toMatchObject({ ok: true, outcome: 'allow' });
    await expect.poll(() => again()).toMatchObject({ ok: true, output: 'tool said: wrote hello' });
    expect(written).toEqual(['hello']);
  });

  it('stays held when a resume of an earlier pause is heard late, and is let go by the resume of the pause in force', async () => {
    const { model } = noteModel();
    startHost(model);
    sendStep('a5.work.1');
    const request = await theRequest();
    const earlier = clock.now() - 1_000;
    clock.advance(30_000);
    const pausedAt = clock.now();
    await pause('a5');
    await expect.poll(async () => (await stored(request.id))?.held?.leftMs).toBe(30_000);
    clock.advance(HOUR);
    await resume('a5', earlier);
    clock.advance(HOUR);
    await bus.settled();
    expect(await stored(request.id)).toMatchObject({ status: 'pending', held: { leftMs: 30_000 } });
    await resume('a5', pausedAt);
    const resumedAt = clock.now();
    await expect
      .poll(async () => (await stored(request.id))?.expiresAt)
      .toBe(new Date(resumedAt + 30_000).toISOString());
  });

  it('is let go when its host missed the resume but gets a step of the task sent after the pause began', async () => {
    const { model } = noteModel();
    startHost(model);
    sendStep('a6.work.1');
    const request = await theRequest();
    clock.advance(40_000);
    await pause('a6');
    await expect.poll(async () => (await stored(request.id))?.held?.leftMs).toBe(20_000);
    // The resume never reaches this host (its connection was down); the workflow, which sends no step while the task
    // is held, sends the step again for want of heartbeats an hour later: the task was resumed since the pause.
    clock.advance(HOUR);
    await bus.settled();
    sendStep('a6.work.1');
    const resentAt = clock.now();
    await expect
      .poll(async () => await stored(request.id))
      .toMatchObject({ status: 'pending', expiresAt: new Date(resentAt + 20_000).toISOString() });
    expect((await stored(request.id))?.held).toBeUndefined();
  });

  it('stays held when a step of its task sent before the pause began arrives late', async () => {
    const { model } = noteModel();
    startHost(model);
    const sentBefore = clock.now();
    sendStep('a7.work.1');
    const request = await theRequest();
    clock.advance(40_000);
    await pause('a7');
    await expect.poll(async () => (await stored(request.id))?.held?.leftMs).toBe(20_000);
    clock.advance(HOUR);
    // A resend sent before the pause, on its way all along.
    sendStep('a7.work.1', sentBefore);
    await bus.settled();
    expect(await stored(request.id)).toMatchObject({ status: 'pending', held: { leftMs: 20_000 } });
  });

  it('runs out at the resume plus the time left, and only then, as a denial', async () => {
    const { model } = noteModel();
    startHost(model);
    const first = sendStep('a3.work.1');
    const request = await theRequest();
    clock.advance(45_000);
    await pause('a3');
    clock.advance(HOUR);
    await bus.settled();
    await resume('a3');
    await expect.poll(async () => (await stored(request.id))?.held).toBeUndefined();
    clock.advance(15_000 - 1);
    await bus.settled();
    expect(bus.eventsOf('approval.decided')).toHaveLength(0);
    clock.advance(1);
    await expect
      .poll(() => bus.eventsOf('approval.decided')[0]?.data)
      .toMatchObject({ decision: 'deny', by: 'timeout' });
    await expect.poll(() => first()).toMatchObject({ ok: false, error: { code: 'paused' } });
    const again = sendStep('a3.work.1');
    await expect.poll(() => again()).toMatchObject({ ok: true, output: expect.stringContaining('denied') });
    expect(written).toEqual([]);
  });
});
