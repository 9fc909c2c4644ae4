import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools, loadPipeline, replayTask } from '@troupe/coordinator';
import { type EventOf, subjects, type TroupeEvent } from '@troupe/protocol';
import { StepJournal } from '@troupe/runtime';
import { startTestMcpHttpServer, type TestMcpHttpServer } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, found, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/**
 * `troupe replay` of what the demo does not exercise: summaries of long conversations, replies and arguments longer
 * than an event keeps (read whole from the step journal), and MCP tools, which run again on the pipeline's servers.
 */
describe('replaying recorded tasks', () => {
  let h: Harness;
  let dir: string;
  let mcp: TestMcpHttpServer;
  let journal: StepJournal;
  const big = 'x'.repeat(6_000);
  const fixtures = ['chatty', 'gated', 'asker', 'memo'];
  const pipelineFile = (name: string) =>
    fixtures.includes(name) ? fixturePath(`${name}.yaml`) : join(dir, `${name}.yaml`);
  const replay = async (
    taskId: string,
    name: string,
    options: { journal?: boolean; tools?: 'run' | 'recorded' } = {},
  ) =>
    replayTask(h.eventsOf(taskId), taskId, {
      pipeline: await loadPipeline(pipelineFile(name), { toolNames: builtinTools().names() }),
      ...(options.tools ? { tools: options.tools } : {}),
      ...(options.journal === false ? {} : { journal: journal.forPipeline(name) }),
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-replay-e2e-'));
    mcp = await startTestMcpHttpServer();
    const script = (replies: unknown[]) => JSON.stringify({ agents: { worker: replies } });
    await writeFile(
      join(dir, 'verbose.script.json'),
      script([
        { toolCalls: [{ name: 'write_file', arguments: { path: 'big.md', content: big } }] },
        { content: `done: ${big}` },
      ]),
    );
    await writeFile(
      join(dir, 'verbose.yaml'),
      `version: 1
name: verbose
models: { scripted: { provider: scripted, script: ./verbose.script.json } }
defaults: { model: scripted }
agents:
  worker: { instructions: Write a long file., tools: [write_file] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    await writeFile(
      join(dir, 'adder.script.json'),
      script([{ toolCalls: [{ name: 'calc.add', arguments: { a: 2, b: 3 } }] }, { content: 'added' }]),
    );
    await writeFile(
      join(dir, 'adder.yaml'),
      `version: 1
name: adder
models: { scripted: { provider: scripted, script: ./adder.script.json } }
defaults: { model: scripted }
mcpServers:
  calc: { transport: http, url: "${mcp.url}", tools: [add] }
agents:
  worker: { instructions: Add., tools: [calc.add] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    h = await startHarness([...fixtures, 'verbose', 'adder'].map(pipelineFile));
    journal = await StepJournal.open(h.bus);
  });
  afterAll(async () => {
    await h?.stop();
    await mcp?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('answers a summary call with the recorded summary, not with the next turn', async () => {
    publishTask(h, 'chatty', { id: 'replay-chatty', goal: 'look around' });
    expect((await h.finalOf('replay-chatty')).kind).toBe('task.completed');
    const result = await replay('replay-chatty', 'chatty');
    expect(result.divergence).toBeUndefined();
    expect(result.recorded.at(-1)).toEqual({ kind: 'task end', status: 'completed' });
    const [summary] = ofKind(result.events, 'context.compacted');
    expect(summary?.data.summary).toBe('Listed the workspace four times; it is empty.');
  });

  it('reads replies and arguments longer than an event keeps whole from the journal', async () => {
    publishTask(h, 'verbose', { id: 'replay-verbose', goal: 'write' });
    const final = await h.finalOf('replay-verbose');
    expect(final.kind === 'task.completed' && final.data.output).toBe(`done: ${big}`);
    // The events kept the start of the arguments and of the reply.
    const [call] = ofKind(h.eventsOf('replay-verbose'), 'tool.call');
    expect(call?.data.arguments.length).toBeLessThan(big.length);

    const whole = await replay('replay-verbose', 'verbose');
    expect(whole.truncated).toEqual([]);
    expect(whole.divergence).toBeUndefined();
    const completed = ofKind(whole.events, 'task.completed')[0];
    expect(completed?.data.output).toBe(`done: ${big}`);

    // Without the journal, the tool is called with the cut arguments, and the replay says it diverged there.
    const cut = await replay('replay-verbose', 'verbose', { journal: false });
    expect(cut.truncated).toEqual(['replay-verbose.work.1 turn 1', 'replay-verbose.work.1 turn 2']);
    expect(cut.divergence?.recorded).toMatchObject({ kind: 'tool', tool: 'write_file' });
    expect(cut.divergence?.replayed).toMatchObject({ kind: 'tool', tool: 'write_file' });
    expect(ofKind(cut.events, 'tool.result')[0]?.data.ok).toBe(false);
  });

  it("runs MCP tools again on the pipeline's servers, or answers them from the record", async () => {
    publishTask(h, 'adder', { id: 'replay-adder', goal: 'add' });
    expect((await h.finalOf('replay-adder')).kind).toBe('task.completed');
    expect(mcp.calls).toHaveLength(1);

    const again = await replay('replay-adder', 'adder');
    expect(again.divergence).toBeUndefined();
    expect(ofKind(again.events, 'tool.result')[0]?.data).toMatchObject({ tool: 'calc.add', ok: true });
    expect(mcp.calls).toEqual([
      { name: 'add', arguments: { a: 2, b: 3 } },
      { name: 'add', arguments: { a: 2, b: 3 } },
    ]);

    const recorded = await replay('replay-adder', 'adder', { tools: 'recorded' });
    expect(recorded.divergence).toBeUndefined();
    expect(ofKind(recorded.events, 'tool.result')[0]?.data.output).toContain('2+3=5');
    expect(mcp.calls).toHaveLength(2);
  });

  it('gives each approval and question the decision and answer the recorded run got', async () => {
    const decide = async (taskId: string, kind: 'approval.requested' | 'human.asked', body: object) => {
      const asked = await found(() => ofKind(h.eventsOf(taskId), kind)[0]);
      const id =
        asked.kind === 'approval.requested'
          ? asked.data.approvalId
          : (asked as EventOf<'human.asked'>).data.questionId;
      await h.client.request(subjects.approval(asked.pipeline, taskId, id), JSON.stringify(body), {
        timeout: 5_000,
      });
    };
    publishTask(h, 'gated', { id: 'replay-gated', goal: 'release v1' });
    await decide('replay-gated', 'approval.requested', { decision: 'allow', by: 'ana' });
    expect((await h.finalOf('replay-gated')).kind).toBe('task.completed');
    publishTask(h, 'asker', { id: 'replay-asker', goal: 'pick a colour' });
    await decide('replay-asker', 'human.asked', { answer: 'teal', by: 'dana' });
    expect((await h.finalOf('replay-asker')).kind).toBe('task.completed');

    const gated = await replay('replay-gated', 'gated');
    expect(gated.divergence).toBeUndefined();
    expect(ofKind(gated.events, 'tool.result').map((r) => r.data.ok)).toEqual([true, true]);
    const asker = await replay('replay-asker', 'asker');
    expect(asker.divergence).toBeUndefined();
    expect(ofKind(asker.events, 'tool.result')[0]?.data.output).toBe('teal');
  });

  it('answers memory tools from the record, since the shared memory holds what it holds now', async () => {
    publishTask(h, 'memo', { id: 'replay-memo', goal: 'note' });
    expect((await h.finalOf('replay-memo')).kind).toBe('task.completed');
    const result = await replay('replay-memo', 'memo');
    expect(result.divergence).toBeUndefined();
    const outputs = (events: TroupeEvent[]) => ofKind(events, 'tool.result').map((r) => r.data.output);
    expect(outputs(result.events)).toEqual(outputs(h.eventsOf('replay-memo')));
  });
});
