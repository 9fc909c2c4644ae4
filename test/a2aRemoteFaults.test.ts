import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { a2aRemoteAgent, type RemoteAgentSettings } from '@troupe/coordinator';
import type { AgentStepReply, AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import { EventFactory, JournalEntry, StepJournal, systemClock, ToolRegistry } from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';

const TOKEN = 'faults-s3cret-token';

/** What the agent's endpoint does with a JSON-RPC request; its card is served well. */
type Answer = (body: { id?: unknown; method?: string }, res: ServerResponse) => void;

/**
 * A remote agent that answers badly — an answer without end, one that stops halfway, a card that is no card — as no
 * A2A SDK's server would: the step must fail clearly, naming the agent, and never hang or take the host down.
 */
describe('a remote agent that answers badly', () => {
  const servers: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await server.close();
  });

  async function agentAt(answer: Answer, card?: (base: string) => string) {
    let base = '';
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        if (req.url === '/card') {
          res.end(card ? card(base) : JSON.stringify(cardOf(base)));
          return;
        }
        answer(JSON.parse(body) as { id?: unknown }, res);
      });
    });
    await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    servers.push({
      close: () => {
        server.closeAllConnections();
        return new Promise<void>((done) => server.close(() => done()));
      },
    });
    return `${base}/card`;
  }
  const cardOf = (base: string) => ({
    name: 'bad',
    description: 'answers badly',
    version: '1',
    supportedInterfaces: [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    capabilities: { streaming: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
  });

  let n = 0;
  async function step(card: string): Promise<{ reply: AgentStepReply; events: TroupeEvent[] }> {
    n += 1;
    const settings: RemoteAgentSettings = {
      name: 'researcher',
      card,
      token: TOKEN,
      requestTimeoutMs: 1_000,
      maxAttempts: 2,
      retryDelayMs: 10,
      pollIntervalMs: 20,
      answerTimeoutMs: 1_000,
    };
    const request: AgentStepRequest = {
      stepId: `bad-${n}.research.1`,
      taskId: `bad-${n}`,
      pipeline: 'remote',
      agent: 'researcher',
      step: 'research',
      round: 1,
      goal: 'look',
      context: [],
      expect: 'text',
      timeoutMs: 20_000,
    };
    const events: TroupeEvent[] = [];
    const reply = await a2aRemoteAgent(settings).startStep(request, {
      registry: new ToolRegistry(),
      workspaceRoot: '/nonexistent',
      clock: systemClock,
      events: new EventFactory(),
      publish: (event) => events.push(event),
      journal: new StepJournal(new MemoryKv(JournalEntry)),
    }).reply;
    // Whatever went wrong, the token is in no reply and no event.
    expect(JSON.stringify({ reply, events })).not.toContain(TOKEN);
    return { reply, events };
  }
  const failure = (reply: AgentStepReply) => (reply.ok ? undefined : reply.error);

  it('fails a step whose agent sends more than Troupe reads, however it sends it', async () => {
    // Said up front in its length, or streamed without one.
    const declared = await agentAt((_body, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(200 * 1024 * 1024) });
      res.write('{');
    });
    const streamed = await agentAt((body, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(
        `{"jsonrpc":"2.0","id":${JSON.stringify(body.id)},"result":{"task":{"id":"t","status":{},"artifacts":[{"parts":[{"text":"`,
      );
      const chunk = 'x'.repeat(1024 * 1024);
      const more = () => {
        // Until the reader stops it: the test passes only if Troupe does.
        while (!res.destroyed) if (!res.write(chunk)) return void res.once('drain', more);
      };
      more();
      res.on('close', () => res.destroy());
    });
    for (const card of [declared, streamed]) {
      const error = failure((await step(card)).reply);
      expect(error?.code).toBe('invalid_response');
      expect(error?.message).toContain('remote agent researcher (');
      expect(error?.message).toContain('larger than 64 MiB');
    }
  });

  it('retries an answer that stops halfway, then fails naming the agent and the time it had', async () => {
    let sends = 0;
    const card = await agentAt((body, res) => {
      if (body.method === 'SendMessage') sends += 1;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"jsonrpc":"2.0",');
    });
    const error = failure((await step(card)).reply);
    expect(error?.code).toBe('connection');
    expect(error?.message).toContain('no whole answer within 1 s');
    // The second attempt looked for the task first, failed as the send did, and named the agent once.
    expect(error?.message.match(/remote agent researcher/g)).toHaveLength(1);
    expect(sends).toBe(1);
  });

  it('retries the extended card as any request, and goes on with it', async () => {
    const methods: string[] = [];
    const card = await agentAt(
      (body, res) => {
        methods.push(body.method ?? '');
        const answer = (result: unknown) => res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
        if (body.method === 'GetExtendedAgentCard') {
          // Busy the first time.
          if (methods.filter((m) => m === body.method).length === 1) {
            res.writeHead(503);
            res.end();
            return;
          }
          answer(cardOf(''));
          return;
        }
        answer({
          task: {
            id: 't-1',
            contextId: 'c-1',
            status: { state: 'TASK_STATE_COMPLETED' },
            artifacts: [{ artifactId: 'a', parts: [{ text: 'found it' }] }],
          },
        });
      },
      (base) =>
        JSON.stringify({ ...cardOf(base), capabilities: { streaming: false, extendedAgentCard: true } }),
    );
    const { reply } = await step(card);
    expect(reply).toMatchObject({ ok: true, output: 'found it' });
    expect(methods).toEqual(['GetExtendedAgentCard', 'GetExtendedAgentCard', 'SendMessage']);
  });

  it('waits out an agent that cannot be read for longer than its retries, once its task is there', async () => {
    let reads = 0;
    const card = await agentAt((body, res) => {
      const answer = (result: unknown) => res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
      const task = (state: string, artifacts: unknown[] = []) => ({
        task: { id: 't-out', contextId: 'c-out', status: { state }, artifacts },
      });
      if (body.method === 'SendMessage') return answer(task('TASK_STATE_WORKING'));
      reads += 1;
      // Down for five reads, past the two attempts each read may make: a restart, a network blip.
      if (reads <= 5) {
        res.writeHead(503);
        res.end();
        return;
      }
      const { task: done } = task('TASK_STATE_COMPLETED', [{ artifactId: 'a', parts: [{ text: 'back' }] }]);
      answer(done);
    });
    const { reply } = await step(card);
    expect(reply).toMatchObject({ ok: true, output: 'back' });
    expect(reads).toBe(6);
  });

  it('fails a step whose card is no card, or is not JSON', async () => {
    for (const body of ['{"hello": "world"}', 'not json {']) {
      const card = await agentAt(
        () => {},
        () => body,
      );
      const error = failure((await step(card)).reply);
      expect(error?.code).toBe('failed');
      expect(error?.message).toContain(`remote agent researcher (${card}): cannot read its agent card`);
    }
  });
});
