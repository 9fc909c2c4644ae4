import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, replayTask } from '@troupe/coordinator';
import { subjects, type TroupeEvent } from '@troupe/protocol';
import { type OtlpReceiver, startOtlpReceiver, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestAgent, type TestAgent } from './support/a2aTestAgent.ts';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import {
  eventsInMessage,
  type Harness,
  kinds,
  ofKind,
  publishTask,
  startHarness,
  waiter,
} from './support/harness.ts';

const TOKEN = 'remote-s3cret';

/** Polls until `find` gives something (what the remote agent received is not an event anything announces). */
const found = <T>(find: () => T | undefined, what: string): Promise<T> =>
  vi.waitFor(
    () => {
      const value = find();
      if (value === undefined) throw new Error(`no ${what} yet`);
      return value;
    },
    { timeout: 20_000, interval: 50 },
  );

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((done) => server.close(() => done()));
  return port;
}

/** A pipeline whose one step is the remote agent at `card`. */
function remotePipeline(name: string, card: string, extra = ''): string {
  return `version: 1
name: ${name}
agents:
  researcher:
    description: a research agent in another system
    approvalTimeout: 60
    a2a:
      card: ${card}
      auth: \${REMOTE_TOKEN}
      pollInterval: 0.05
      retryDelay: 0.05
      maxAttempts: 3
      timeout: 2
flow:
  - id: research
    kind: agent
    agent: researcher
${extra}`;
}

describe('a remote A2A agent as a step', () => {
  let agent: TestAgent;
  let h: Harness;
  let dir: string;
  let downCard: string;

  beforeAll(async () => {
    agent = await startTestAgent();
    dir = await mkdtemp(join(tmpdir(), 'troupe-a2a-'));
    const file = join(dir, 'remote.yaml');
    await writeFile(file, remotePipeline('remote', agent.cardUrl));
    // A port that was free a moment ago: every request to it is refused.
    downCard = `http://127.0.0.1:${await freePort()}/.well-known/agent-card.json`;
    const down = join(dir, 'down.yaml');
    await writeFile(down, remotePipeline('remote-down', downCard));
    // The remote agent in a foreach step's items, and as a reviewer.
    const flow = join(dir, 'flow.yaml');
    await writeFile(join(dir, 'flow.script.yaml'), 'agents:\n  writer:\n    - content: the draft\n');
    await writeFile(
      flow,
      `version: 1
name: remote-flow
models: { scripted: { provider: scripted, script: ./flow.script.yaml } }
defaults: { model: scripted }
agents:
  writer: { instructions: Write it up. }
  researcher:
    a2a: { card: ${agent.cardUrl}, auth: "\${REMOTE_TOKEN}", pollInterval: 0.05 }
flow:
  - id: each
    kind: foreach
    items: "['north', 'south']"
    maxItems: 5
    do: [{ id: look, kind: agent, agent: researcher }]
  - { id: draft, kind: agent, agent: writer }
  - { id: check, kind: review, agent: researcher, onReject: draft, maxRounds: 2 }
`,
    );
    h = await startHarness([file, down, flow], { env: { REMOTE_TOKEN: TOKEN } });
  });
  afterAll(async () => {
    await h?.stop();
    await agent?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('completes with the remote task artifact as its output, the token and the trace passed on', async () => {
    publishTask(h, 'remote', { id: 'echo-1', goal: 'echo' });
    const final = await h.finalOf('echo-1');
    expect(final.kind).toBe('task.completed');
    const events = h.eventsOf('echo-1');
    const [completed] = ofKind(events, 'step.completed');
    expect(completed?.data).toMatchObject({
      agent: 'researcher',
      ok: true,
      output: 'researcher found: echo',
    });
    expect(ofKind(events, 'step.started')[0]?.data.agent).toBe('researcher');
    // The call shows as a call of the step, like a tool's: where it went, and what came back.
    const [call] = ofKind(events, 'tool.call');
    expect(call?.data).toMatchObject({ agent: 'researcher', tool: 'a2a' });
    expect(JSON.parse(call?.data.arguments ?? '{}')).toMatchObject({ card: agent.cardUrl });
    expect(ofKind(events, 'tool.result')[0]?.data).toMatchObject({
      ok: true,
      output: 'researcher found: echo',
    });
    const sent = agent.messages.filter((m) => m.messageId === 'troupe-echo-1.research.1');
    expect(sent).toHaveLength(1);
    // The message carries the step as text and as data.
    const parts = sent[0]?.parts.map((p) => p.content?.$case);
    expect(parts).toEqual(['text', 'data']);
    const rpc = agent.requests.filter((r) => r.method === 'SendMessage');
    expect(rpc.at(-1)?.authorization).toBe(`Bearer ${TOKEN}`);
    // The trace goes on: the task's trace id, in a W3C traceparent.
    const traceId = final.traceparent.split('-')[1];
    expect(rpc.at(-1)?.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-0[01]$`));
  });

  it('shows the remote call in troupe trace', async () => {
    const trace = await troupe(['trace', 'echo-1', '--server', h.nats.url, '--json']);
    expect(trace.code, trace.stderr).toBe(0);
    const report = JSON.parse(trace.stdout) as {
      steps: {
        agent: string;
        entries: { kind: string; tool?: string; result?: { ok: boolean; output: string } }[];
      }[];
    };
    expect(report.steps.map((s) => s.agent)).toEqual(['researcher']);
    expect(report.steps[0]?.entries).toEqual([
      expect.objectContaining({
        kind: 'tool',
        tool: 'a2a',
        result: expect.objectContaining({ ok: true, output: 'researcher found: echo' }),
      }),
    ]);
  });

  it('turns a remote INPUT_REQUIRED into a question a person answers, sent back as the next message', async () => {
    publishTask(h, 'remote', { id: 'ask-1', goal: 'ask' });
    const asked = await found(
      () => ofKind(h.eventsOf('ask-1'), 'human.asked')[0],
      'the question to a person',
    );
    expect(asked.data.question).toContain('Which year should the report cover?');
    expect(asked.data.agent).toBe('researcher');
    const answered = await troupe(['answer', asked.data.questionId, '2025', '--server', h.nats.url]);
    expect(answered.code, answered.stderr).toBe(0);
    const final = await h.finalOf('ask-1');
    expect(final.kind).toBe('task.completed');
    expect(ofKind(h.eventsOf('ask-1'), 'step.completed')[0]?.data.output).toBe('researcher was told: 2025');
    const answers = agent.messages.filter((m) => m.messageId === 'troupe-ask-1.research.1-answer-1');
    expect(answers).toHaveLength(1);
  });

  it('serves a foreach step’s items and a review step: the verdict comes from the remote agent’s data', async () => {
    publishTask(h, 'remote-flow', { id: 'flow-1', goal: 'scan' });
    const final = await h.finalOf('flow-1');
    expect(final.kind).toBe('task.completed');
    const events = h.eventsOf('flow-1');
    const [joined] = ofKind(events, 'items.joined');
    expect(joined).toBeDefined();
    const outputs = ofKind(events, 'step.completed')
      .filter((e) => e.data.step === 'look')
      .map((e) => e.data.output)
      .sort();
    expect(outputs).toEqual(['researcher found: scan north', 'researcher found: scan south']);
    const [review] = ofKind(events, 'step.completed').filter((e) => e.data.step === 'check');
    expect(review?.data.verdict).toEqual({ decision: 'approve', feedback: 'looks good' });
    expect(final.kind === 'task.completed' && final.data.approved).not.toBe(false);
  });

  it('replays a task with remote steps from its record, calling no remote agent', async () => {
    const before = agent.messages.length;
    const pipeline = await loadPipeline(join(dir, 'remote.yaml'), {
      toolNames: builtinTools().names(),
      env: { REMOTE_TOKEN: TOKEN },
    });
    const result = await replayTask(h.eventsOf('echo-1'), 'echo-1', { pipeline });
    expect(result.divergence).toBeUndefined();
    expect(result.replayed).toEqual(result.recorded);
    expect(result.replayed.map((f) => f.kind)).toEqual([
      'step',
      'tool',
      'tool result',
      'step end',
      'task end',
    ]);
    expect(agent.messages.length).toBe(before);
  });

  it('cancels the remote task when the Troupe task is cancelled', async () => {
    publishTask(h, 'remote', { id: 'slow-1', goal: 'slow' });
    await found(
      () => agent.messages.find((m) => m.messageId === 'troupe-slow-1.research.1'),
      'the message at the remote agent',
    );
    const cancelled = await troupe(['cancel', 'slow-1', '--server', h.nats.url]);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect((await h.finalOf('slow-1')).kind).toBe('task.cancelled');
    await expect.poll(() => agent.cancelled.length, { timeout: 10_000 }).toBe(1);
  });

  it('retries a remote agent that cannot be reached, then fails naming it and its URL', async () => {
    publishTask(h, 'remote-down', { id: 'down-1', goal: 'echo' });
    const final = await h.finalOf('down-1');
    expect(final.kind).toBe('task.failed');
    const [completed] = ofKind(h.eventsOf('down-1'), 'step.completed');
    expect(completed?.data.error?.code).toBe('connection');
    const message = final.kind === 'task.failed' ? final.data.message : '';
    expect(message).toContain(`remote agent researcher (${downCard})`);
    expect(message).toContain('after 3 attempts');
    expect(message).toContain('ECONNREFUSED');
    expect(kinds(h.eventsOf('down-1'))).toContain('step.started');
  });
});

describe('a remote call in a coordinator process', () => {
  let nats: TestNats;
  let agent: TestAgent;
  let client: NatsConnection;
  let home: string;
  const events: TroupeEvent[] = [];
  const processes: CliProcess[] = [];
  const { notify, waitFor } = waiter();

  let receiver: OtlpReceiver;

  beforeAll(async () => {
    nats = await startTestNats();
    receiver = await startOtlpReceiver();
    agent = await startTestAgent();
    home = await mkdtemp(join(tmpdir(), 'troupe-a2a-kill-'));
    client = await connect({ servers: nats.url, name: 'a2a-kill-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        events.push(...eventsInMessage(msg));
        notify();
      },
    });
    await client.flush();
  });
  afterEach(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
  });
  afterAll(async () => {
    await client?.close();
    await agent?.close();
    await receiver?.stop();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('traces the call as an invoke_agent client span with a2a.* attributes, and passes its trace on', async () => {
    const file = join(home, 'traced.yaml');
    await writeFile(file, remotePipeline('remote-traced', agent.cardUrl));
    const p = startTroupe(
      ['up', file, '--server', nats.url, '--home', home],
      cliEnv({
        REMOTE_TOKEN: TOKEN,
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_BSP_SCHEDULE_DELAY: '100',
      }),
    );
    processes.push(p);
    await p.waitFor(/troupe is up/);
    client.publish(subjects.task('remote-traced'), JSON.stringify({ id: 'traced-1', goal: 'echo' }));
    const span = await found(
      () => receiver.spans.find((s) => s.name === 'invoke_agent researcher'),
      'the span of the remote call',
    );
    const workflow = await found(
      () => receiver.spans.find((s) => s.name === 'invoke_workflow remote-traced'),
      'the workflow span',
    );
    expect(span.kind).toBe(3);
    expect(span.traceId).toBe(workflow.traceId);
    expect(span.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.provider.name': 'a2a',
      'gen_ai.agent.name': 'researcher',
      'a2a.agent.url': agent.cardUrl,
      'a2a.task.id': expect.any(String),
      'a2a.context.id': expect.stringMatching(/^troupe-[0-9a-f]{32}$/),
      'a2a.task.state': 'TASK_STATE_COMPLETED',
    });
    // The remote agent was handed the trace at this very span.
    const sent = agent.requests.filter((r) => r.method === 'SendMessage').at(-1);
    expect(sent?.traceparent).toBe(`00-${span.traceId}-${span.spanId}-01`);
  });

  it('resumes the call from the journal: the message reached the remote agent once, and the step completes', async () => {
    const file = join(home, 'remote.yaml');
    await writeFile(file, remotePipeline('remote-kill', agent.cardUrl));
    const up = () => {
      const p = startTroupe(
        ['up', file, '--server', nats.url, '--home', home, '--ack-wait', '2'],
        cliEnv({ REMOTE_TOKEN: TOKEN }),
      );
      processes.push(p);
      return p;
    };
    const sendsBefore = agent.requests.filter((r) => r.method === 'SendMessage').length;
    const first = up();
    await first.waitFor(/troupe is up/);
    client.publish(subjects.task('remote-kill'), JSON.stringify({ id: 'kill-1', goal: 'hold' }));
    // The remote task is under way and its id journaled: the coordinator reads it while it waits.
    await found(
      () => agent.requests.find((r) => r.method === 'GetTask'),
      'the coordinator waiting on the remote task',
    );
    expect(await first.stop('SIGKILL')).toBeNull();
    await up().waitFor(/troupe is up/);
    agent.release();
    const final = await waitFor(
      () =>
        events.find(
          (e) =>
            e.taskId === 'kill-1' &&
            e.kind.startsWith('task.') &&
            e.kind !== 'task.accepted' &&
            e.kind !== 'task.resumed',
        ),
      'the end of task kill-1',
      60_000,
    );
    expect(final.kind).toBe('task.completed');
    expect(agent.messages.filter((m) => m.messageId === 'troupe-kill-1.research.1')).toHaveLength(1);
    expect(agent.requests.filter((r) => r.method === 'SendMessage')).toHaveLength(sendsBefore + 1);
    const [completed] = ofKind(
      events.filter((e) => e.taskId === 'kill-1'),
      'step.completed',
    );
    expect(completed?.data.output).toBe('researcher found: hold');
  }, 120_000);
});
