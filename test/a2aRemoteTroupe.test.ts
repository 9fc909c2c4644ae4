import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { a2aRemoteAgent } from '@troupe/coordinator';
import type { AgentStepRequest } from '@troupe/protocol';
import { EventFactory, JournalEntry, StepJournal, systemClock, ToolRegistry } from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type A2aEnv, ECHO_OUTPUT, startA2aEnv, TOKENS } from './support/a2aServer.ts';
import { troupe } from './support/cli.ts';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/**
 * Two Troupes, each on its own nats-server: the first runs a pipeline whose agent is a pipeline of the second,
 * reached through the second's gateway as an A2A agent (its card, its bearer token).
 */
describe('a remote agent that is another Troupe', () => {
  let remote: A2aEnv;
  let h: Harness;
  let dir: string;

  beforeAll(async () => {
    remote = await startA2aEnv();
    dir = await mkdtemp(join(tmpdir(), 'troupe-a2a-troupe-'));
    const pipeline = (name: string, remotePipeline: string) => `version: 1
name: ${name}
agents:
  poet:
    a2a:
      card: ${remote.gateway.url}/a2a/${remotePipeline}/.well-known/agent-card.json
      auth: \${OTHER_TROUPE_TOKEN}
      pollInterval: 0.1
flow:
  - { id: ask-poet, kind: agent, agent: poet }
`;
    await writeFile(join(dir, 'haiku.yaml'), pipeline('haiku', 'echo'));
    await writeFile(join(dir, 'release.yaml'), pipeline('release', 'confirming'));
    h = await startHarness([join(dir, 'haiku.yaml'), join(dir, 'release.yaml')], {
      env: { OTHER_TROUPE_TOKEN: TOKENS.admin },
    });
  });
  afterAll(async () => {
    await h?.stop();
    await remote?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the other Troupe’s pipeline as a step: its output, as text and structured, is the step’s', async () => {
    publishTask(h, 'haiku', { id: 'poem-1', goal: 'the sea' });
    const final = await h.finalOf('poem-1');
    expect(final.kind).toBe('task.completed');
    const [completed] = ofKind(h.eventsOf('poem-1'), 'step.completed');
    expect(completed?.data).toMatchObject({ agent: 'poet', ok: true });
    expect(JSON.parse(completed?.data.output ?? '')).toEqual(ECHO_OUTPUT);
    // On the other side, one task of pipeline echo ran with this step's goal in its text.
    const accepted = remote.h.events.filter((e) => e.kind === 'task.accepted' && e.pipeline === 'echo');
    expect(accepted).toHaveLength(1);
    expect(JSON.stringify(accepted[0]?.data)).toContain('the sea');
  });

  it('calls an agent whose card offers only HTTP+JSON on that binding, and follows its task to the end', async () => {
    const urls: string[] = [];
    // The gateway's card names both bindings; this one is read with only its HTTP+JSON interface left.
    const restOnly: typeof fetch = async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      urls.push(url);
      const response = await fetch(input, init);
      if (!url.endsWith('/agent-card.json')) return response;
      const card = (await response.json()) as { supportedInterfaces: { protocolBinding: string }[] };
      card.supportedInterfaces = card.supportedInterfaces.filter((i) => i.protocolBinding === 'HTTP+JSON');
      return Response.json(card);
    };
    const card = `${remote.gateway.url}/a2a/echo/.well-known/agent-card.json`;
    const request: AgentStepRequest = {
      stepId: 'rest-1.ask-poet.1',
      taskId: 'rest-1',
      pipeline: 'haiku',
      agent: 'poet',
      step: 'ask-poet',
      round: 1,
      goal: 'the river',
      context: [],
      expect: 'text',
      timeoutMs: 30_000,
    };
    const reply = await a2aRemoteAgent(
      {
        name: 'poet',
        card,
        token: TOKENS.admin,
        requestTimeoutMs: 10_000,
        maxAttempts: 2,
        retryDelayMs: 50,
        pollIntervalMs: 100,
        answerTimeoutMs: 10_000,
      },
      { fetch: restOnly },
    ).startStep(request, {
      registry: new ToolRegistry(),
      workspaceRoot: '/nonexistent',
      clock: systemClock,
      events: new EventFactory(),
      publish: () => {},
      journal: new StepJournal(new MemoryKv(JournalEntry)),
    }).reply;
    expect(reply).toMatchObject({ ok: true, structured: ECHO_OUTPUT });
    // Every request after the card's went to the HTTP+JSON routes: the send, then the stream (the gateway streams) and
    // the reads of the task. A task that ended before the send answered needs neither, so neither is required.
    const rest = `${remote.gateway.url}/a2a/echo/rest/`;
    expect(urls.slice(1).every((u) => u.startsWith(rest))).toBe(true);
    expect(urls[1]).toBe(`${rest}message:send`);
    expect(urls.slice(2).every((u) => u.endsWith(':subscribe') || /\/tasks\/[^/:]+$/.test(u))).toBe(true);
  });

  it('asks a person here what the other Troupe’s human step asks, and sends the answer there', async () => {
    publishTask(h, 'release', { id: 'release-1', goal: 'ship 1.2' });
    const asked = await vi.waitFor(
      () => {
        const question = ofKind(h.eventsOf('release-1'), 'human.asked')[0];
        if (!question) throw new Error('no question yet');
        return question;
      },
      { timeout: 30_000, interval: 50 },
    );
    expect(asked.data.question).toContain('Ship the draft?');
    const answered = await troupe([
      'answer',
      asked.data.questionId,
      '{"ship": true}',
      '--server',
      h.nats.url,
    ]);
    expect(answered.code, answered.stderr).toBe(0);
    const final = await h.finalOf('release-1');
    expect(final.kind).toBe('task.completed');
    // The other Troupe's task went through its human step with that answer, and on to ship.
    const remoteTask = remote.h.events.find((e) => e.kind === 'task.accepted' && e.pipeline === 'confirming');
    const remoteEvents = remote.h.eventsOf(remoteTask?.taskId ?? '');
    expect(ofKind(remoteEvents, 'human.answered')[0]?.data.answer).toContain('"ship": true');
    expect(ofKind(remoteEvents, 'step.completed').map((e) => e.data.step)).toContain('ship');
  });
});
