import { mkdtemp, readFile, rm, writeFile as writeFileFs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { forkTask, readTaskEvents, restartTask } from '@troupe/client';
import { type EventOf, valueBucket } from '@troupe/protocol';
import { defineTool, jetstreamManagerOf } from '@troupe/runtime';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { cliEnv, troupe } from './support/cli.ts';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/** Writes notes.md, counting its runs: a restart must not run it again. */
let jots = 0;
const jot = defineTool({
  name: 'jot',
  description: 'Writes notes.md.',
  input: z.object({ text: z.string() }),
  async run({ text }, ctx) {
    jots += 1;
    await writeFileFs(join(ctx.workspace, 'notes.md'), text);
    return 'wrote notes.md';
  },
});

const pipeline = (name: string, baseURL: string, handOff: boolean) => `version: 1
name: ${name}
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${baseURL}" }
defaults: { model: gpt }
${handOff ? 'workspace: { handOff: true }\n' : ''}agents:
  writer: { instructions: Write it., tools: [jot] }
  reader: { instructions: Read it., tools: [read_file] }
  checker: { instructions: Check it. }
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: read, kind: agent, agent: reader }
  - { id: check, kind: agent, agent: checker }
`;

/**
 * Issue 32 (restart and fork carry the workspace): step 1 writes a file, step 2 reads it, step 3 fails. A restart
 * from step 2 starts with the file step 1 handed on, read from the original's object (no byte copied), and step 1
 * runs none of its model or tool calls again. Without hand-off, nothing is carried, and the new task says why.
 */
describe('a restart carries the workspace files of the steps it reuses', () => {
  let openai: FakeModelServer;
  let h: Harness;
  let dir: string;
  const logLines: string[] = [];

  beforeAll(async () => {
    openai = await startFakeOpenAI();
    dir = await mkdtemp(join(tmpdir(), 'troupe-carry-'));
    await writeFileFs(join(dir, 'carry.yaml'), pipeline('carry', openai.baseURL, true));
    await writeFileFs(join(dir, 'stay.yaml'), pipeline('stay', openai.baseURL, false));
    h = await startHarness([join(dir, 'carry.yaml'), join(dir, 'stay.yaml')], {
      env: { OPENAI_API_KEY: 'sk-test' },
      tools: [jot],
      logLines,
    });
  }, 60_000);
  afterAll(async () => {
    await h?.stop();
    await openai?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A task whose writer jots notes.md, whose reader reads it, and whose checker's model fails. */
  const failAtCheck = async (pipelineName: string, id: string) => {
    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'jot', arguments: '{"text":"from step 1"}' }] },
      { kind: 'message', content: 'wrote the notes' },
      { kind: 'message', toolCalls: [{ name: 'read_file', arguments: '{"path":"notes.md"}' }] },
      { kind: 'message', content: 'the notes say: from step 1' },
      { kind: 'error', status: 400, message: 'the checker model refused' },
    );
    publishTask(h, pipelineName, { id, goal: 'write, read, check' });
    expect((await h.finalOf(id, 60_000)).kind).toBe('task.failed');
  };
  /** The model and tool calls a task's step made, as its events in EVENTS say. */
  const callsOf = async (taskId: string, pipelineName: string, step: string) => {
    const stored = await readTaskEvents(h.bus, taskId, pipelineName);
    const of = (stepId: string) => stepId.startsWith(`${taskId}.${step}.`);
    return {
      model: ofKind(stored, 'llm.request').filter((e) => of(e.data.stepId)).length,
      tool: ofKind(stored, 'tool.call').filter((e) => of(e.data.stepId)).length,
      stored,
    };
  };
  /** The names of the objects in a pipeline's values bucket, from their metadata subjects (base64url names). */
  const objectNames = async (pipelineName: string): Promise<string[]> => {
    const bucket = valueBucket(pipelineName);
    const jsm = await jetstreamManagerOf(h.bus);
    const info = await jsm.streams.info(`OBJ_${bucket}`, { subjects_filter: `$O.${bucket}.M.>` });
    return Object.keys(info.state.subjects ?? {}).map((subject) =>
      Buffer.from(subject.slice(`$O.${bucket}.M.`.length), 'base64url').toString('utf8'),
    );
  };
  const readsOf = (taskId: string) =>
    ofKind(h.eventsOf(taskId), 'tool.result').filter((e) => e.data.tool === 'read_file');

  it('a restart from the step that reads the file finds it, and the step that wrote it does not run again', async () => {
    await failAtCheck('carry', 'carry-1');
    expect(jots).toBe(1);
    const before = openai.requests.length;

    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'read_file', arguments: '{"path":"notes.md"}' }] },
      { kind: 'message', content: 'read it again' },
      { kind: 'message', content: 'all checked' },
    );
    const { taskId } = await restartTask(h.bus, 'carry-1', { from: 'read', id: 'carry-2' });
    const final = await h.finalOf(taskId, 60_000);
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'all checked' } });

    // The reader read the writer's file in the new task's own workspace.
    expect(readsOf(taskId).map((e) => [e.data.ok, e.data.output])).toEqual([[true, 'from step 1']]);
    expect(await readFile(join(h.workspaceRoot, 'carry', taskId, 'notes.md'), 'utf8')).toBe('from step 1');
    // The writer ran nothing again: no model call, no tool call.
    expect(openai.requests.length - before).toBe(3);
    expect(jots).toBe(1);
    const writer = await callsOf(taskId, 'carry', 'write');
    expect([writer.model, writer.tool]).toEqual([0, 0]);
    // It says what it carried, and its read step started with the original's file.
    const accepted = ofKind(writer.stored, 'task.accepted')[0] as EventOf<'task.accepted'>;
    expect(accepted.data.workspace).toEqual({ files: 1, bytes: 11 });
    const read = ofKind(writer.stored, 'step.started').find((e) => e.data.step === 'read');
    expect(Object.values(read?.data.workspace ?? {})).toEqual([
      expect.objectContaining({ bytes: 11, task: 'carry-1' }),
    ]);
    // No byte was copied: the new task stored no object of its own, the file is the original's object.
    const names = await objectNames('carry');
    expect(names.filter((n) => n.startsWith(`ws.${taskId}.`))).toEqual([]);
    expect(names.filter((n) => n.startsWith('ws.carry-1.'))).toHaveLength(1);
    const trace = await troupe(['trace', taskId, '--server', h.nats.url], cliEnv(), 60_000);
    expect(trace.stdout).toContain(
      'files: 1 file (11 bytes) carried from task carry-1, as they were when read started there',
    );
  });

  it("a fork that sets the writer's output still carries the file it wrote: a set edits an output, not files", async () => {
    const before = openai.requests.length;
    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'read_file', arguments: '{"path":"notes.md"}' }] },
      { kind: 'message', content: 'read it in the fork' },
      { kind: 'message', content: 'checked the fork' },
    );
    const { taskId } = await forkTask(h.bus, 'carry-1', {
      at: 'read',
      set: { write: 'an edited account of the notes' },
      id: 'carry-fork',
    });
    expect((await h.finalOf(taskId, 60_000)).kind).toBe('task.completed');
    expect(readsOf(taskId).map((e) => [e.data.ok, e.data.output])).toEqual([[true, 'from step 1']]);
    expect(JSON.stringify(openai.requests[before]?.body)).toContain('an edited account of the notes');
    expect(jots).toBe(1);
  });

  it("without hand-off nothing is carried, and the new task's task.accepted and log say why", async () => {
    await failAtCheck('stay', 'stay-1');
    expect(jots).toBe(2);
    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'read_file', arguments: '{"path":"notes.md"}' }] },
      { kind: 'message', content: 'no notes' },
      { kind: 'message', content: 'checked' },
    );
    const { taskId } = await restartTask(h.bus, 'stay-1', { from: 'read', id: 'stay-2' });
    expect((await h.finalOf(taskId, 60_000)).kind).toBe('task.completed');
    const accepted = ofKind(h.eventsOf(taskId), 'task.accepted')[0];
    expect(accepted?.data.workspace).toMatchObject({ files: 0, bytes: 0 });
    expect(accepted?.data.workspace?.note).toContain(
      'no workspace files are carried from task stay-1: its events record none handed on before step read started',
    );
    expect(logLines.some((line) => line.includes('no workspace files are carried from task stay-1'))).toBe(
      true,
    );
    // The reader, in a workspace of its own, does not find the file the original's writer left on this disk.
    expect(readsOf(taskId).map((e) => [e.data.ok, e.data.error?.code])).toEqual([[false, 'not_found']]);
    expect(jots).toBe(2);
  });
});
