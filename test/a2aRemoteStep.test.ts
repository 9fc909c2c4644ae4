import { type Message, type Part, Role } from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { a2aRemoteAgent, contextIdOf, type RemoteAgentSettings } from '@troupe/coordinator';
import type { AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import {
  EventFactory,
  JournalEntry,
  type RemoteCallRecord,
  StepJournal,
  systemClock,
  ToolRegistry,
} from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestAgent, type TestAgent } from './support/a2aTestAgent.ts';

/**
 * The remote call resumed from what its journal holds, as a run of the step after a crash finds it, against a real
 * A2A agent (the SDK's server): what a dead run sent is looked for before anything is sent again.
 */
describe('a remote step resumed from its journal', () => {
  let agent: TestAgent;
  let client: Client;
  let journal: StepJournal;
  let events: TroupeEvent[];
  let settings: RemoteAgentSettings;
  let n = 0;

  beforeAll(async () => {
    agent = await startTestAgent();
    settings = {
      name: 'researcher',
      card: agent.cardUrl,
      requestTimeoutMs: 2_000,
      maxAttempts: 2,
      retryDelayMs: 10,
      pollIntervalMs: 20,
      answerTimeoutMs: 10_000,
    };
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new JsonRpcTransportFactory()],
        cardResolver: new DefaultAgentCardResolver(),
      }),
    );
    client = await factory.createFromUrl(agent.cardUrl, '');
  });
  afterAll(async () => {
    await agent?.close();
  });
  beforeEach(() => {
    journal = new StepJournal(new MemoryKv(JournalEntry));
    events = [];
  });

  /** A step of a task of its own, resent (not fresh): a run of it may have gone before. */
  const stepRequest = (goal: string): AgentStepRequest => {
    n += 1;
    const taskId = `resume-${n}`;
    return {
      stepId: `${taskId}.research.1`,
      taskId,
      pipeline: 'remote',
      agent: 'researcher',
      step: 'research',
      round: 1,
      goal,
      context: [],
      expect: 'text',
      timeoutMs: 10_000,
    };
  };
  const idsOf = (request: AgentStepRequest) => ({
    messageId: `troupe-${request.stepId}`,
    contextId: contextIdOf(request),
  });
  const run = (request: AgentStepRequest) =>
    a2aRemoteAgent(settings).startStep(request, {
      registry: new ToolRegistry(),
      workspaceRoot: '/nonexistent',
      clock: systemClock,
      events: new EventFactory(),
      publish: (event) => events.push(event),
      journal,
    }).reply;
  const record = (request: AgentStepRequest, fields: Partial<RemoteCallRecord> = {}) =>
    journal.recordRemoteCall(
      StepJournal.remoteKey(request.stepId),
      { endpoint: agent.cardUrl, ...idsOf(request), answers: 0, ...fields },
      new Date(),
    );
  /** Sends what the dead run sent: the step's message, with its ids. */
  const sendAsTheDeadRun = async (
    request: AgentStepRequest,
    extra: Partial<Message> = {},
    parts?: Part[],
  ) => {
    const message: Message = {
      ...idsOf(request),
      taskId: '',
      role: Role.ROLE_USER,
      parts: parts ?? [
        {
          content: { $case: 'data', value: { goal: request.goal } },
          metadata: undefined,
          filename: '',
          mediaType: '',
        },
      ],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
      ...extra,
    };
    return client.sendMessage({
      tenant: '',
      message,
      configuration: {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: false,
      },
      metadata: undefined,
    });
  };
  const received = (messageId: string) => agent.messages.filter((m) => m.messageId === messageId).length;

  it('finds the task its message made (ListTasks by context) when only the ids were journaled, and sends nothing', async () => {
    const request = stepRequest('echo');
    await record(request);
    await sendAsTheDeadRun(request);
    const reply = await run(request);
    expect(reply).toMatchObject({ ok: true, output: 'researcher found: echo' });
    expect(received(idsOf(request).messageId)).toBe(1);
    const kept = await journal.remoteCall(StepJournal.remoteKey(request.stepId));
    expect(kept?.taskId).toEqual(expect.any(String));
  });

  it('sends the message, once, when only the ids were journaled and it never arrived', async () => {
    const request = stepRequest('echo');
    await record(request);
    const reply = await run(request);
    expect(reply.ok).toBe(true);
    expect(received(idsOf(request).messageId)).toBe(1);
  });

  it('reads the journaled task and sends nothing when its id was journaled', async () => {
    const request = stepRequest('echo');
    const task = await sendAsTheDeadRun(request);
    await record(request, { taskId: 'id' in task ? task.id : '' });
    const sends = agent.requests.filter((r) => r.method === 'SendMessage').length;
    expect(await run(request)).toMatchObject({ ok: true, output: 'researcher found: echo' });
    expect(agent.requests.filter((r) => r.method === 'SendMessage').length).toBe(sends);
  });

  it('a first delivery that arrives after a resend’s run recorded the task goes on with that task, sending nothing', async () => {
    // The resend's run sent the message and journaled its task while the first delivery waited on its way here.
    const request = stepRequest('echo');
    const task = await sendAsTheDeadRun(request);
    const taskId = 'id' in task ? task.id : '';
    await record(request, { taskId });
    const sends = agent.requests.filter((r) => r.method === 'SendMessage').length;
    expect(await run({ ...request, fresh: true })).toMatchObject({
      ok: true,
      output: 'researcher found: echo',
    });
    expect(agent.requests.filter((r) => r.method === 'SendMessage').length).toBe(sends);
    expect((await journal.remoteCall(StepJournal.remoteKey(request.stepId)))?.taskId).toBe(taskId);
  });

  it('when two live runs both sent the message, the one whose task was journaled second cancels it and follows the first', async () => {
    const request = stepRequest('hold');
    // The other run's record: it is about to send.
    await record(request);
    let other: string | undefined;
    const racing: typeof fetch = async (input, init) => {
      if (other === undefined && String(init?.body ?? '').includes('"SendMessage"')) {
        // The other run's message goes, and its task's id is journaled, while this run's is on its way.
        other = '';
        const task = await client.sendMessage({
          tenant: '',
          message: {
            ...idsOf(request),
            taskId: '',
            role: Role.ROLE_USER,
            parts: [
              {
                content: { $case: 'data', value: { goal: 'hold' } },
                metadata: undefined,
                filename: '',
                mediaType: '',
              },
            ],
            metadata: undefined,
            extensions: [],
            referenceTaskIds: [],
          },
          configuration: {
            acceptedOutputModes: [],
            taskPushNotificationConfig: undefined,
            returnImmediately: true,
          },
          metadata: undefined,
        });
        other = 'id' in task ? task.id : '';
        await record(request, { taskId: other });
      }
      return fetch(input, init);
    };
    const reply = a2aRemoteAgent(settings, { fetch: racing }).startStep(request, {
      registry: new ToolRegistry(),
      workspaceRoot: '/nonexistent',
      clock: systemClock,
      events: new EventFactory(),
      publish: () => {},
      journal,
    }).reply;
    await expect.poll(() => agent.cancelled.length).toBe(1);
    expect(agent.cancelled[0]).not.toBe(other);
    agent.release();
    expect(await reply).toMatchObject({ ok: true, output: 'researcher found: hold' });
    expect((await journal.remoteCall(StepJournal.remoteKey(request.stepId)))?.taskId).toBe(other);
  });

  it('does not ask anyone again, nor answer again, a question the dead run had answered', async () => {
    const request = stepRequest('ask');
    const asked = await sendAsTheDeadRun(request);
    const taskId = 'id' in asked ? asked.id : '';
    // The dead run had recorded which question it was answering, then sent the answer, then died.
    const question = await client.getTask({ tenant: '', id: taskId });
    const status = question.status;
    const key = [
      status?.timestamp ?? '',
      status?.message?.messageId ?? '',
      'Which year should the report cover?',
    ].join('|');
    await record(request, { taskId, asking: key });
    await sendAsTheDeadRun(request, { messageId: `${idsOf(request).messageId}-answer-1`, taskId }, [
      { content: { $case: 'text', value: '1999' }, metadata: undefined, filename: '', mediaType: '' },
    ]);
    // No human gate is given: asking anyone would fail the step.
    const reply = await run(request);
    expect(reply).toMatchObject({ ok: true, output: 'researcher was told: 1999' });
    expect(received(`${idsOf(request).messageId}-answer-1`)).toBe(1);
  });

  it('counts as sent an answer the agent moved on from, though its history does not hold it: a new question is asked anew', async () => {
    const request = stepRequest('ask-twice');
    const asked = await sendAsTheDeadRun(request);
    const taskId = 'id' in asked ? asked.id : '';
    const first = (await client.getTask({ tenant: '', id: taskId })).status;
    const key = [
      first?.timestamp ?? '',
      first?.message?.messageId ?? '',
      'Which year should the report cover?',
    ].join('|');
    // The dead run asked a person (request q-1, answered 1999), recorded which question it answered, sent the
    // answer — kept by the agent under an id of its own, as Troupe's gateway keeps it — and died.
    await record(request, { taskId, asking: key });
    await journal.recordHumanRequest(
      StepJournal.humanKey(`${StepJournal.remoteKey(request.stepId)}.1`, 'question'),
      'q-1',
      new Date(),
    );
    await sendAsTheDeadRun(request, { messageId: 'kept-under-its-own-id', taskId }, [
      { content: { $case: 'text', value: '1999' }, metadata: undefined, filename: '', mediaType: '' },
    ]);
    const questions: string[] = [];
    // A person: request q-1 was answered 1999; a new request is answered March.
    const human = {
      approve: () => Promise.reject(new Error('no approvals here')),
      ask: async (
        question: string,
        _scope: unknown,
        _signal: AbortSignal,
        options?: { id?: string; onAsked?: (id: string) => Promise<void> },
      ) => {
        if (options?.id === 'q-1') return '1999';
        questions.push(question);
        await options?.onAsked?.('q-2');
        return 'March';
      },
    };
    const reply = await a2aRemoteAgent(settings).startStep(request, {
      registry: new ToolRegistry(),
      workspaceRoot: '/nonexistent',
      clock: systemClock,
      events: new EventFactory(),
      publish: () => {},
      journal,
      human,
    }).reply;
    expect(reply).toMatchObject({ ok: true, output: 'researcher was told: March' });
    expect(questions).toEqual(['researcher asks: And which month of 1999?']);
  });

  it('follows an agent that streams on SubscribeToTask: the end is seen at once, not at the next poll', async () => {
    const streaming = await startTestAgent('streamer', { streaming: true });
    try {
      streaming.hold();
      const request = stepRequest('hold');
      const started = Date.now();
      const reply = a2aRemoteAgent({
        ...settings,
        card: streaming.cardUrl,
        pollIntervalMs: 60_000,
      }).startStep(request, {
        registry: new ToolRegistry(),
        workspaceRoot: '/nonexistent',
        clock: systemClock,
        events: new EventFactory(),
        publish: () => {},
        journal,
      }).reply;
      await expect.poll(() => streaming.requests.map((r) => r.method)).toContain('SubscribeToTask');
      streaming.release();
      expect(await reply).toMatchObject({ ok: true, output: 'streamer found: hold' });
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await streaming.close();
    }
  });

  it('says in its events that it called the agent, and how that ended', async () => {
    const request = stepRequest('echo');
    await run(request);
    expect(events.map((e) => e.kind)).toEqual(['tool.call', 'tool.result']);
    expect(events[1]?.data).toMatchObject({ tool: 'a2a', ok: true, output: 'researcher found: echo' });
  });
});
