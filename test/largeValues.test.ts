import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { builtinTools, loadPipeline, replayTask } from '@troupe/coordinator';
import type { Gateway } from '@troupe/gateway';
import { BUCKETS, type EventOf, type ValueRef } from '@troupe/protocol';
import { defineTool, StepJournal, ValueStore } from '@troupe/runtime';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startAdminGateway } from './support/adminGateway.ts';
import { troupe } from './support/cli.ts';
import { startExtraCoordinator } from './support/extraCoordinator.ts';
import { found, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';
import { numbered } from './support/numbered.ts';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Issue 27, item 4: nothing is cut in silence. A tool returns 5 MB, a step replies 2 MB and the task ends with
 * 2 MB: the model sees a capped tool result that says where the whole is, the next step gets the earlier step's
 * whole output, and every message that could not hold a value carries a preview and a reference to it.
 */
describe('large values', () => {
  const toolResult = numbered('T', 5 * 1024 * 1024);
  const written = numbered('W', 2 * 1024 * 1024);
  const answer = numbered('A', 2 * 1024 * 1024);
  let h: Harness;
  let dir: string;
  let openai: FakeModelServer;
  let values: ValueStore;
  let gateway: Gateway;
  const token = 'tok-large-values-admin';
  const get = async (path: string, init: RequestInit = {}) => {
    const response = await fetch(`${gateway.url}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-large-'));
    openai = await startFakeOpenAI();
    await writeFile(
      join(dir, 'bulky.yaml'),
      `version: 1
name: bulky
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
agents:
  writer: { instructions: Gather the data., tools: [big_result] }
  reader: { instructions: Read what was written. }
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: read, kind: agent, agent: reader }
`,
    );
    await writeFile(
      join(dir, 'scribe.yaml'),
      `version: 1
name: scribe
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
agents:
  scribe: { instructions: Write the file., tools: [write_file] }
flow:
  - { id: write, kind: agent, agent: scribe }
`,
    );
    // Run by coordinators of the test's own (not the harness's), so one can stop mid-task and another resume.
    await writeFile(
      join(dir, 'relay.yaml'),
      `version: 1
name: relay
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
agents:
  writer: { instructions: Write it all. }
  reader: { instructions: Read it all. }
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: read, kind: agent, agent: reader }
`,
    );
    await writeFile(
      join(dir, 'nested.yaml'),
      `version: 1
name: nested
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
agents:
  wrapper: { instructions: Wrap up what the sub-task gave. }
flow:
  - { id: sub, kind: pipeline, pipeline: bulky, goal: Gather it }
  - { id: wrap, kind: agent, agent: wrapper }
`,
    );
    const bigResult = defineTool({
      name: 'big_result',
      description: 'Returns 5 MB of data',
      input: z.object({}),
      run: async () => toolResult,
    });
    h = await startHarness(
      ['bulky.yaml', 'nested.yaml', 'scribe.yaml'].map((f) => join(dir, f)),
      {
        tools: [bigResult],
        env: { OPENAI_API_KEY: 'sk-test' },
      },
    );
    values = new ValueStore(h.bus);
    gateway = await startAdminGateway(h.bus, token);
  }, 60_000);
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
    await openai?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('carries a 5 MB tool result and 2 MB outputs through a task, each whole where it is used', async () => {
    openai.enqueue(
      { kind: 'message', toolCalls: [{ name: 'big_result', arguments: '{}' }] },
      { kind: 'message', content: written },
      { kind: 'message', content: answer },
    );
    publishTask(h, 'bulky', { id: 'big-1', goal: 'move a lot of data' });
    const final = await h.finalOf('big-1', 60_000);
    expect(final.kind).toBe('task.completed');
    const completed = final as EventOf<'task.completed'>;

    // The tool result: the model and the event see 64 KiB that say where the whole is; the whole is kept.
    const [tool] = ofKind(h.eventsOf('big-1'), 'tool.result');
    const toolRef = tool?.data.outputRef as ValueRef;
    expect(toolRef).toMatchObject({ bucket: 'troupe-values-bulky', bytes: toolResult.length });
    expect(tool?.data.truncated).toEqual({ originalBytes: toolResult.length });
    expect(await values.read(toolRef)).toBe(toolResult);

    // The writer's 2 MB reply: a preview and a reference in its event; the reader's prompt had all of it.
    const steps = ofKind(h.eventsOf('big-1'), 'step.completed');
    const write = steps.find((e) => e.data.step === 'write');
    expect(write?.data.outputRef).toMatchObject({ bytes: written.length, sha256: sha256(written) });
    // Named for the step and the value's digest.
    expect(write?.data.output).toMatch(/the whole is object "big-1\.write\.1\.output\.[0-9a-f]{16}"/);
    expect(Buffer.byteLength(write?.data.output ?? '')).toBeLessThan(16 * 1024);
    const prompt = JSON.stringify(openai.requests.at(-1)?.body.messages);
    expect(prompt).toContain(JSON.stringify(written).slice(1, -1));

    // The task's 2 MB output: a preview and a reference in task.completed, whole in the store.
    expect(completed.data.outputRef).toMatchObject({ bytes: answer.length, sha256: sha256(answer) });
    expect(await values.read(completed.data.outputRef as ValueRef)).toBe(answer);

    // The writer's 2 MB model reply is journaled, whole, though no KV value could hold it.
    const journal = (await StepJournal.open(h.bus)).forPipeline('bulky', values);
    const recorded = await journal.entry('big-1.write.1.2.model');
    expect(recorded?.kind === 'model.reply' && recorded.reply.content).toBe(written);

    // The checkpoint holds previews and references, so it fits a KV value.
    const workflows = await new Kvm(h.client).open(BUCKETS.workflows);
    expect((await workflows.get('big-1'))?.length).toBeLessThan(256 * 1024);
  }, 90_000);

  it('answers the gateway with the whole output: a task, a submit that waits, a trace', async () => {
    await h.finalOf('big-1', 60_000);
    const task = await get('/v1/tasks/big-1');
    expect(task.status).toBe(200);
    expect(task.body.output).toBe(answer);
    expect(task.body).not.toHaveProperty('outputRef');

    const trace = await get('/v1/tasks/big-1/trace');
    expect(trace.body.output).toBe(answer);
    const steps = trace.body.steps as { entries: { kind: string; result?: { output: string } }[] }[];
    const tool = steps.flatMap((step) => step.entries).find((entry) => entry.kind === 'tool');
    expect(tool?.result?.output).toBe(toolResult);

    // A list shows each task's preview, and says where the whole is.
    const list = await get('/v1/tasks?pipeline=bulky');
    const listed = (list.body.tasks as { taskId: string; output: string; outputRef?: ValueRef }[]).find(
      (t) => t.taskId === 'big-1',
    );
    expect(listed?.outputRef).toMatchObject({ bucket: 'troupe-values-bulky', bytes: answer.length });

    const second = numbered('S', 2 * 1024 * 1024);
    openai.enqueue({ kind: 'message', content: 'no tools this time' }, { kind: 'message', content: second });
    const waited = await get('/v1/pipelines/bulky/tasks?wait=60', {
      method: 'POST',
      body: JSON.stringify({ id: 'big-2', goal: 'again' }),
    });
    expect(waited.status).toBe(200);
    expect(waited.body.status).toBe('completed');
    expect(waited.body.output).toBe(second);
  }, 90_000);

  it('prints the whole outputs in troupe trace --json', async () => {
    await h.finalOf('big-1', 60_000);
    const result = await troupe(['trace', 'big-1', '--json', '--server', h.nats.url], undefined, 60_000);
    expect(result.code).toBe(0);
    const tree = JSON.parse(result.stdout) as {
      output: string;
      steps: { entries: { kind: string; result?: { output: string } }[] }[];
    };
    expect(tree.output).toBe(answer);
    const tool = tree.steps.flatMap((step) => step.entries).find((entry) => entry.kind === 'tool');
    expect(tool?.result?.output).toBe(toolResult);
  }, 90_000);

  it('replays the task from its record with the whole tool result and outputs', async () => {
    await h.finalOf('big-1', 60_000);
    const pipeline = await loadPipeline(join(dir, 'bulky.yaml'), {
      toolNames: [...builtinTools().names(), 'big_result'],
      env: { OPENAI_API_KEY: 'sk-test' },
    });
    const result = await replayTask(h.eventsOf('big-1'), 'big-1', {
      pipeline,
      tools: 'recorded',
      journal: (await StepJournal.open(h.bus)).forPipeline('bulky', values),
      values,
    });

    expect(result.divergence).toBeUndefined();
    // Both 2 MB replies were too large for their events and for the journal: read whole from the object store.
    expect(result.truncated).toEqual([]);
    const [tool] = ofKind(result.events, 'tool.result');
    expect(tool?.data.truncated).toEqual({ originalBytes: toolResult.length });
    const [end] = ofKind(result.events, 'task.completed');
    expect(end?.data.output).toBe(answer);
  }, 90_000);

  it('hands a sub-task’s 2 MB output whole to the next step, kept in the parent pipeline’s own bucket', async () => {
    const sub = numbered('P', 2 * 1024 * 1024);
    openai.enqueue(
      { kind: 'message', content: 'gathered' },
      { kind: 'message', content: sub },
      { kind: 'message', content: 'wrapped' },
    );
    publishTask(h, 'nested', { id: 'nest-1', goal: 'nest a large output' });
    const final = await h.finalOf('nest-1', 60_000);
    expect(final.kind).toBe('task.completed');

    const step = ofKind(h.eventsOf('nest-1'), 'step.completed').find((e) => e.data.step === 'sub');
    expect(step?.data.outputRef).toMatchObject({ bucket: 'troupe-values-nested', bytes: sub.length });
    expect(await values.read(step?.data.outputRef as ValueRef)).toBe(sub);
    const prompt = JSON.stringify(openai.requests.at(-1)?.body.messages);
    expect(prompt).toContain(JSON.stringify(sub).slice(1, -1));
  }, 90_000);

  it('runs a tool call whose arguments are 2 MB, journaling its claim and the reply that made it', async () => {
    const content = numbered('F', 2 * 1024 * 1024);
    openai.enqueue(
      {
        kind: 'message',
        toolCalls: [{ name: 'write_file', arguments: JSON.stringify({ path: 'big.md', content }) }],
      },
      { kind: 'message', content: 'written' },
    );
    publishTask(h, 'scribe', { id: 'scribe-1', goal: 'write a large file' });
    const final = await h.finalOf('scribe-1', 60_000);

    expect(final.kind).toBe('task.completed');
    expect(await readFile(join(h.workspaceRoot, 'scribe', 'scribe-1', 'big.md'), 'utf8')).toBe(content);
    const journal = (await StepJournal.open(h.bus)).forPipeline('scribe', values);
    expect(await journal.entry('scribe-1.write.1.1.0')).toMatchObject({
      kind: 'tool.result',
      tool: 'write_file',
    });
  }, 90_000);

  it('resumes a task whose checkpoint names a 2 MB output on another coordinator, which hands it on whole', async () => {
    const startRelay = (name: string) =>
      startExtraCoordinator(h, join(dir, 'relay.yaml'), name, { OPENAI_API_KEY: 'sk-test' });
    const written = numbered('R', 2 * 1024 * 1024);
    openai.enqueue({ kind: 'message', content: written }, { kind: 'hang' });
    const stopFirst = await startRelay('relay-a');
    publishTask(h, 'relay', { id: 'relay-1', goal: 'relay a large output' });
    // The reader's model call hangs: the writer's output is in the checkpoint, by reference, when the first stops.
    await found(
      () => ofKind(h.eventsOf('relay-1'), 'llm.request').find((e) => e.data.stepId === 'relay-1.read.1'),
      'the reader asking its model',
    );
    await stopFirst();
    openai.enqueue({ kind: 'message', content: 'read it all' });
    const stopSecond = await startRelay('relay-b');
    try {
      const final = await h.finalOf('relay-1', 60_000);
      expect(final.kind).toBe('task.completed');
      expect(ofKind(h.eventsOf('relay-1'), 'task.resumed').length).toBeGreaterThan(0);
      const writes = ofKind(h.eventsOf('relay-1'), 'step.completed').filter((e) => e.data.step === 'write');
      expect(new Set(writes.map((e) => e.id)).size).toBe(1);
      expect(JSON.stringify(openai.requests.at(-1)?.body.messages)).toContain(
        JSON.stringify(written).slice(1, -1),
      );
    } finally {
      await stopSecond();
    }
  }, 120_000);
});
