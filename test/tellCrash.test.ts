import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FINAL_EVENT_KINDS, subjects } from '@troupe/protocol';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe } from './support/cli.ts';
import { facts, ofKind, waiter } from './support/harness.ts';
import { type KillTestServer, startKillTestServer } from './support/natsUsers.ts';

const TOLD = 'use the v2 API, not v1';

/**
 * A person's message told while a tool call runs, with a real agent host (the one `troupe up` runs) and a model
 * behind the real OpenAI client (a wire-faithful fake that keeps every request): the agent's next model call has the
 * message, once, and after a kill -9 of the coordinator (and its host) the step's next run puts it at the same turn
 * of the conversation, so no later call has it twice, or lacks it.
 */
describe('tell across kill -9, with a real agent host', () => {
  let openai: FakeModelServer;
  let server: KillTestServer;
  let dir: string;
  let file: string;
  const processes: CliProcess[] = [];
  const { notify, waitFor: until } = waiter();
  const env = () => cliEnv({ OPENAI_API_KEY: 'sk-test' });

  beforeAll(async () => {
    openai = await startFakeOpenAI();
    dir = await mkdtemp(join(tmpdir(), 'troupe-told-'));
    file = join(dir, 'teller.yaml');
    await writeFile(
      file,
      `version: 1
name: teller
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
agents:
  clerk:
    instructions: Do the work.
    tools: [run_command]
    permissions: [{ tool: run_command, decision: allow, commands: [echo, sleep] }]
flow:
  - { id: work, kind: agent, agent: clerk }
`,
    );
    server = await startKillTestServer(file, false, 'tell-test', notify);
  }, 60_000);
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await server?.stop();
    await openai?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const up = async () => {
    const p = startTroupe(
      ['up', file, '--ack-wait', '2', '--server', server.nats.url, '--home', join(dir, 'home')],
      env(),
    );
    processes.push(p);
    await p.waitFor(/troupe is up/, 60_000);
    return p;
  };
  const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
  /** How many times the told message is in the messages of the model request at `index`. */
  const toldIn = (index: number): number => {
    const messages = (openai.requests[index]?.body as { messages?: unknown[] } | undefined)?.messages ?? [];
    return JSON.stringify(messages).split(TOLD).length - 1;
  };

  it('a message told while a tool call runs is read by the next model call exactly once, across a crash', async () => {
    const first = await up();
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

    const reply = await server.client.request(
      subjects.control('told-1'),
      JSON.stringify({ action: 'tell', text: TOLD, by: 'ann' }),
      { timeout: 15_000 },
    );
    expect(reply.json()).toEqual({ ok: true, taskId: 'told-1', outcome: 'told', messageId: 'm-1' });

    // The next model call reads it (journaled under its turn first), then asks for a second, long tool call.
    await until(() => ofKind(eventsOf('told-1'), 'tool.call')[1], 'the second tool call', 30_000);
    expect(openai.requests).toHaveLength(2);
    expect(toldIn(0)).toBe(0);
    expect(toldIn(1)).toBe(1);
    expect(ofKind(eventsOf('told-1'), 'agent.told')[0]?.data).toMatchObject({ messageIds: ['m-1'], turn: 2 });

    // Killed mid-call: the resumed step replays both model replies from its journal, the message at turn 2.
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);
    openai.enqueue({ kind: 'message', content: 'done, on v2' });
    await up();
    const final = await until(
      () => eventsOf('told-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'told-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'done, on v2' } });
    // One more model call in all, with the message once, where it was.
    expect(openai.requests).toHaveLength(3);
    expect(toldIn(2)).toBe(1);
    const messages = JSON.stringify(
      (openai.requests[2]?.body as { messages?: unknown[] } | undefined)?.messages ?? [],
    );
    expect(messages.indexOf(TOLD)).toBeLessThan(messages.indexOf('echo second'));
    expect(messages.indexOf(TOLD)).toBeGreaterThan(messages.indexOf('echo first'));
    // One fact, published again under its id by the restored task (its unread message, kept by the record).
    expect(ofKind(facts(eventsOf('told-1')), 'task.told')).toHaveLength(1);
  });

  it('a message told just before a kill, read by no call yet, is read by the next model call of the resumed step once', async () => {
    const first = await up();
    const before = openai.requests.length;
    openai.enqueue({
      kind: 'message',
      toolCalls: [{ name: 'run_command', arguments: '{"command":"echo only && sleep 5"}' }],
    });
    server.client.publish(subjects.task('teller'), JSON.stringify({ id: 'told-2', goal: 'do it' }));
    await until(() => ofKind(eventsOf('told-2'), 'tool.call')[0], 'the tool call');
    const reply = await server.client.request(
      subjects.control('told-2'),
      JSON.stringify({ action: 'tell', text: TOLD }),
      { timeout: 15_000 },
    );
    expect(reply.json()).toMatchObject({ ok: true, outcome: 'told', messageId: 'm-1' });
    // Killed while the tool call runs: the message is in the task's record only, no agent has read it.
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);
    expect(ofKind(eventsOf('told-2'), 'agent.told')).toHaveLength(0);

    openai.enqueue({ kind: 'message', content: 'done, on v2' });
    await up();
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
    if (processes.length === 0) await up();
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
    const paused = await server.client.request(
      subjects.control('paused-1'),
      JSON.stringify({ action: 'pause', by: 'ann' }),
      { timeout: 15_000 },
    );
    expect(paused.json()).toMatchObject({ ok: true, outcome: 'paused' });
    // The tool call finishes; the host stops at the boundary and replies paused: no second model call.
    await until(() => ofKind(eventsOf('paused-1'), 'tool.result')[0], 'the tool result', 30_000);
    const again = await server.client.request(
      subjects.control('paused-1'),
      JSON.stringify({ action: 'pause' }),
      { timeout: 15_000 },
    );
    expect(again.json()).toMatchObject({ ok: false, error: { code: 'already_paused' } });
    expect(openai.requests.length - before).toBe(1);

    const resumed = await server.client.request(
      subjects.control('paused-1'),
      JSON.stringify({ action: 'resume' }),
      { timeout: 15_000 },
    );
    expect(resumed.json()).toMatchObject({ ok: true, outcome: 'resumed' });
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
