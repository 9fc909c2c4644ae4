import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { builtinTools, DEFAULT_INTAKE_LIMITS, loadPipeline, replayTask } from '@troupe/coordinator';
import type { Gateway } from '@troupe/gateway';
import { BUCKETS, type EventOf, inputBucket, type ValueRef } from '@troupe/protocol';
import { StepJournal, ValueStore } from '@troupe/runtime';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAdminGateway } from './support/adminGateway.ts';
import { troupe } from './support/cli.ts';
import { startExtraCoordinator } from './support/extraCoordinator.ts';
import { found, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';
import { numbered } from './support/numbered.ts';

/** Whether a model request's prompt holds all of `text` (as the prompt's JSON of the input escapes it), not a preview. */
const promptHolds = (body: { messages: { content: unknown }[] }, text: string) =>
  body.messages
    .map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)))
    .some((content) => content.includes(JSON.stringify(text).slice(1, -1)));

/**
 * Issue 27, item 4, for task inputs: an input too large for a task message (5 MB here) is stored in the pipeline's
 * inputs bucket by whoever submits it (the gateway, `troupe submit`, a `pipeline` step) and the task refers to it;
 * the workflow carries previews of its large keys, so its checkpoints stay small and its conditions still read the
 * small keys, and every step's agent reads the input whole.
 */
describe('large task inputs', () => {
  const book = numbered('B', 5 * 1024 * 1024);
  let h: Harness;
  let dir: string;
  let openai: FakeModelServer;
  let values: ValueStore;
  let gateway: Gateway;
  const token = 'tok-large-inputs-admin';
  const post = async (url: string, body: unknown) => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const get = async (path: string) => {
    const response = await fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  /** The model requests made while `run` runs: its task's. */
  const requestsDuring = async (run: () => Promise<unknown>) => {
    const before = openai.requests.length;
    await run();
    return openai.requests.slice(before);
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-large-inputs-'));
    openai = await startFakeOpenAI();
    const model = `models:\n  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }\ndefaults: { model: gpt }\n`;
    await writeFile(
      join(dir, 'inbox.yaml'),
      `version: 1
name: inbox
${model}agents:
  reader: { instructions: Read the book. }
  urgent: { instructions: Hurry. }
flow:
  - { id: read, kind: agent, agent: reader }
  - { id: rush, kind: agent, agent: urgent, when: "input.priority == 'high'" }
  - id: each
    kind: foreach
    items: input.parts
    maxItems: 5
    do:
      - { id: part, kind: agent, agent: reader }
`,
    );
    await writeFile(
      join(dir, 'outer.yaml'),
      `version: 1
name: outer
${model}agents:
  closer: { instructions: Close. }
flow:
  - { id: sub, kind: pipeline, pipeline: lite, goal: Read it in the sub-task }
  - { id: close, kind: agent, agent: closer }
`,
    );
    await writeFile(
      join(dir, 'lite.yaml'),
      `version: 1
name: lite
${model}agents:
  reader: { instructions: Read the book. }
flow:
  - { id: read, kind: agent, agent: reader }
`,
    );
    // Run by coordinators of the test's own (not the harness's), so one can stop mid-task and another resume.
    await writeFile(
      join(dir, 'relay.yaml'),
      `version: 1
name: relay
${model}agents:
  writer: { instructions: Write. }
  reader: { instructions: Read the book. }
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: read, kind: agent, agent: reader }
`,
    );
    h = await startHarness(
      ['inbox.yaml', 'outer.yaml', 'lite.yaml'].map((f) => join(dir, f)),
      { env: { OPENAI_API_KEY: 'sk-test' } },
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

  it('runs a task given 5 MB over the gateway: stored, cut to previews in the workflow, whole for every step', async () => {
    const input = { book, priority: 'high', parts: ['one', 'two'] };
    const requests = await requestsDuring(async () => {
      openai.enqueue(...Array.from({ length: 4 }, () => ({ kind: 'message' as const, content: 'read' })));
      const submitted = await post(`${gateway.url}/v1/pipelines/inbox/tasks`, {
        id: 'in-1',
        goal: 'read the book',
        input,
      });
      expect(submitted.status).toBe(202);
      expect((await h.finalOf('in-1', 60_000)).kind).toBe('task.completed');
    });

    // read, rush (its condition read the small key) and one per part: each prompt had the whole book.
    expect(requests).toHaveLength(4);
    for (const request of requests) expect(promptHolds(request.body, book)).toBe(true);
    // Each item's step had its item laid over the input, beside the whole book.
    const items = requests.map(
      (r) => /"item": "(one|two)"/.exec(String(r.body.messages.at(-1)?.content))?.[1],
    );
    expect(items.sort()).toEqual(['one', 'two', undefined, undefined]);

    // The task refers to its input, stored once in the pipeline's inputs bucket; the event shows previews.
    const [accepted] = ofKind(h.eventsOf('in-1'), 'task.accepted');
    const cut = accepted?.data.inputCut;
    expect(cut?.keys).toEqual(['book']);
    expect(cut?.ref).toMatchObject({
      bucket: inputBucket('inbox'),
      bytes: Buffer.byteLength(JSON.stringify(input)),
    });
    expect(cut?.ref.name).toMatch(/^in-1\.input\.[0-9a-f]{16}$/);
    expect(JSON.parse(await values.read(cut?.ref as ValueRef))).toEqual(input);
    expect(accepted?.data.input?.priority).toBe('high');
    expect(String(accepted?.data.input?.book)).toMatch(
      /bytes of input\.book; the whole input is object "in-1\.input\./,
    );
    expect(Buffer.byteLength(JSON.stringify(accepted?.data))).toBeLessThan(32 * 1024);

    // Its checkpoints hold previews: the record fits a KV value with room to spare.
    const workflows = await new Kvm(h.client).open(BUCKETS.workflows);
    expect((await workflows.get('in-1'))?.length).toBeLessThan(128 * 1024);

    // The gateway's trace gives the input whole.
    const trace = await get('/v1/tasks/in-1/trace');
    expect(trace.status).toBe(200);
    expect(trace.body.input).toEqual(input);
    expect(trace.body).not.toHaveProperty('inputCut');
  }, 120_000);

  it('replays that task, whose steps read the stored input whole again', async () => {
    await h.finalOf('in-1', 60_000);
    const pipeline = await loadPipeline(join(dir, 'inbox.yaml'), {
      toolNames: builtinTools().names(),
      env: { OPENAI_API_KEY: 'sk-test' },
    });
    const result = await replayTask(h.eventsOf('in-1'), 'in-1', {
      pipeline,
      tools: 'recorded',
      journal: (await StepJournal.open(h.bus)).forPipeline('inbox', values),
      values,
    });
    expect(result.divergence).toBeUndefined();
    expect(
      ofKind(result.events, 'step.completed')
        .map((e) => e.data.step)
        .sort(),
    ).toEqual(['part', 'part', 'read', 'rush']);
  }, 60_000);

  it('stores an input given to troupe submit --input-file, and prints it whole in troupe trace --json', async () => {
    const file = join(dir, 'book.json');
    await writeFile(file, JSON.stringify({ book, priority: 'low', parts: [] }));
    openai.enqueue({ kind: 'message', content: 'read from a file' });
    const requests = await requestsDuring(async () => {
      const result = await troupe(
        [
          'submit',
          'inbox',
          'read the file',
          '--id',
          'in-cli',
          '--input-file',
          file,
          '--wait',
          '--server',
          h.nats.url,
        ],
        undefined,
        90_000,
      );
      expect(result.stderr).not.toMatch(/error/i);
      expect(result.code).toBe(0);
    });
    // The condition read `priority: low`: only the reader ran, on the whole book.
    expect(requests).toHaveLength(1);
    expect(promptHolds(requests[0]?.body, book)).toBe(true);

    const traced = await troupe(['trace', 'in-cli', '--json', '--server', h.nats.url], undefined, 60_000);
    expect(traced.code).toBe(0);
    expect((JSON.parse(traced.stdout) as { input: { book: string } }).input.book).toBe(book);
  }, 120_000);

  it('hands a task’s large input whole to the sub-task of a pipeline step, stored in that pipeline’s bucket', async () => {
    openai.enqueue(
      { kind: 'message', content: 'read in the sub-task' },
      { kind: 'message', content: 'closed' },
    );
    const requests = await requestsDuring(async () => {
      const submitted = await post(`${gateway.url}/v1/pipelines/outer/tasks?wait=60`, {
        id: 'out-1',
        goal: 'read it one level down',
        input: { book },
      });
      expect(submitted.body.status).toBe('completed');
    });
    expect(requests).toHaveLength(2);
    expect(promptHolds(requests[0]?.body, book)).toBe(true);
    const child = h.events.find(
      (e): e is EventOf<'task.accepted'> => e.kind === 'task.accepted' && e.pipeline === 'lite',
    );
    expect(child?.data.parent?.taskId).toBe('out-1');
    expect(child?.data.inputCut?.ref.bucket).toBe(inputBucket('lite'));
  }, 120_000);

  it('resumes on another coordinator a task a plain NATS client gave a stored input, whose steps read it whole', async () => {
    const startRelay = (name: string) =>
      startExtraCoordinator(h, join(dir, 'relay.yaml'), name, { OPENAI_API_KEY: 'sk-test' });
    openai.enqueue({ kind: 'message', content: 'written' }, { kind: 'hang' });
    const stopFirst = await startRelay('relay-a');
    // As any client can: the input stored in the pipeline's inputs bucket, then the task published naming it.
    const inputRef = await new ValueStore({ connection: h.client }).storeInput(
      'relay',
      'relay-in-1',
      JSON.stringify({ book, note: 'small' }),
    );
    publishTask(h, 'relay', { id: 'relay-in-1', goal: 'relay a large input', inputRef });
    // The reader's model call hangs: the cut input is in the checkpoint when the first coordinator stops.
    await found(
      () =>
        ofKind(h.eventsOf('relay-in-1'), 'llm.request').find((e) => e.data.stepId === 'relay-in-1.read.1'),
      'the reader asking its model',
    );
    await stopFirst();
    openai.enqueue({ kind: 'message', content: 'read it all' });
    const before = openai.requests.length;
    const stopSecond = await startRelay('relay-b');
    try {
      expect((await h.finalOf('relay-in-1', 60_000)).kind).toBe('task.completed');
      expect(ofKind(h.eventsOf('relay-in-1'), 'task.resumed').length).toBeGreaterThan(0);
      const writes = ofKind(h.eventsOf('relay-in-1'), 'step.completed').filter(
        (e) => e.data.step === 'write',
      );
      expect(new Set(writes.map((e) => e.id)).size).toBe(1);
      const resumed = openai.requests.slice(before);
      expect(resumed).toHaveLength(1);
      expect(promptHolds(resumed[0]?.body, book)).toBe(true);
    } finally {
      await stopSecond();
    }
  }, 120_000);

  it('refuses a stored input that is not the task’s own, or not there, on troupe.events._invalid', async () => {
    const ref = await values.storeInput('inbox', 'owner-1', JSON.stringify({ secret: 'x'.repeat(300_000) }));
    publishTask(h, 'inbox', { id: 'thief-1', goal: 'read another task’s input', inputRef: ref });
    const theft = await h.nextInvalid((e) => e.reason.includes('thief-1'));
    expect(theft.reason).toMatch(
      /names object "owner-1\.input\.[0-9a-f]{16}"; task thief-1's input is named thief-1\.input\./,
    );

    const gone = { ...ref, name: 'lost-1.input.0123456789abcdef' };
    publishTask(h, 'inbox', { id: 'lost-1', goal: 'read an input never stored', inputRef: gone });
    const lost = await h.nextInvalid((e) => e.reason.includes('lost-1'));
    expect(lost.reason).toMatch(
      /cannot read the task's stored input: value troupe-inputs-inbox\/lost-1\.input\.\w+ is not stored/,
    );
    // Neither ran: nothing was recorded for them.
    expect(h.eventsOf('thief-1')).toEqual([]);
    expect(h.eventsOf('lost-1')).toEqual([]);
  }, 60_000);

  it('refuses at the gateway an input past the stored limit with a 413 that names it', async () => {
    const small = await startAdminGateway(h.bus, token, {
      taskLimits: { ...DEFAULT_INTAKE_LIMITS, maxInputBytes: 1024 * 1024 },
    });
    try {
      const over = await post(`${small.url}/v1/pipelines/inbox/tasks`, {
        id: 'over-1',
        goal: 'too much',
        input: { book: book.slice(0, 1_100_000) },
      });
      expect(over.status).toBe(413);
      expect(over.body.error).toMatchObject({
        code: 'too_large',
        message: expect.stringMatching(/input is \d+ bytes; the limit is 1048576/),
      });
      // Past the body limit too: refused before it is read.
      const huge = await post(`${small.url}/v1/pipelines/inbox/tasks`, {
        goal: 'far too much',
        input: { book },
      });
      expect(huge.status).toBe(413);
      expect(h.eventsOf('over-1')).toEqual([]);
    } finally {
      await small.close();
    }
  }, 60_000);
});
