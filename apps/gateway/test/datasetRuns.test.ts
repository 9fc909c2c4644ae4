import { EvalStore } from '@troupe/client';
import {
  BUCKETS,
  Dataset,
  type EventData,
  type EventKind,
  emptyUsage,
  type TroupeEvent,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, EventFactory, preview } from '@troupe/runtime';
import {
  connectBus,
  ensureTroupeStreams,
  type JetStreamBus,
  KvStore,
  StepJournal,
} from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { hashToken, TokenStore } from '../src/auth.ts';
import { type Gateway, startGateway } from '../src/gateway.ts';

const TOKENS = {
  curator: 'runs-curator-token-0123456789abcd',
  reader: 'runs-reader-token-0123456789abcde',
  notesOnly: 'runs-notes-token-0123456789abcdef',
};

/** The first reply of notes-1, longer than an event keeps: its event holds the start, the journal the whole. */
const LONG = 'a long first draft. '.repeat(400);

let nats: TestNats;
let bus: JetStreamBus;
let gateway: Gateway;

/**
 * A task as a coordinator records it: its events in `EVENTS`, its record in KV `workflows` and, for a reply its
 * event kept only in part, the step journal's record of it.
 */
async function record(
  pipeline: string,
  taskId: string,
  ended: 'completed' | 'running',
  createdAt: string,
  reply = `the note of ${taskId}`,
): Promise<void> {
  const factory = new EventFactory({ now: () => Date.parse(createdAt) });
  const scope = { pipeline, taskId, traceparent: '' };
  const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
    factory.make(kind, scope, data);
  const stepId = `${taskId}.write.1`;
  const usage = { inputTokens: 3, outputTokens: 2, cachedTokens: 0 };
  const events = [
    make('task.accepted', { goal: `write ${taskId}`, metadata: { team: 'docs' } }),
    make('step.started', { step: 'write', agent: 'writer', round: 1, stepId }),
    make('llm.response', {
      agent: 'writer',
      stepId,
      turn: 1,
      provider: 'openai',
      model: 'gpt-x',
      usage,
      costUsd: 0,
      finishReason: 'stop',
      content: preview(reply),
      toolCalls: [],
      durationMs: 1,
    }),
  ];
  if (ended === 'completed') {
    const totals = { ...emptyUsage(), ...usage, modelCalls: 1 };
    events.push(
      make('step.completed', {
        step: 'write',
        agent: 'writer',
        round: 1,
        stepId,
        ok: true,
        output: 'done',
        usage: totals,
        turns: 1,
        durationMs: 2,
      }),
      make('task.completed', {
        output: `note ${taskId}`,
        rounds: 1,
        usage: totals,
        usageByAgent: {},
        durationMs: 3,
      }),
    );
  }
  for (const event of events) expect(await bus.publishEvent(event)).toBe(true);
  if (reply.length > 4_000) {
    const journal = (await StepJournal.open(bus)).forPipeline(pipeline);
    await journal.recordModelReply(
      StepJournal.modelKey(stepId, 1),
      [],
      {
        content: reply,
        toolCalls: [],
        usage,
        costUsd: 0,
        finishReason: 'stop',
        provider: 'openai',
        model: 'gpt-x',
        durationMs: 1,
      },
      new Date(createdAt),
    );
  }
  const workflows = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  await workflows.put(taskId, {
    taskId,
    pipeline,
    streamSequence: 0,
    status: ended,
    state: ended === 'completed' ? 'done' : 'write',
    goal: `write ${taskId}`,
    round: 1,
    usage: emptyUsage(),
    createdAt,
    updatedAt: createdAt,
  });
}

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'dataset-runs-test', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
  await record('notes', 'notes-1', 'completed', '2026-12-01T09:00:00.000Z', LONG);
  await record('notes', 'notes-2', 'completed', '2026-12-01T10:00:00.000Z');
  await record('notes', 'notes-3', 'running', '2026-12-01T11:00:00.000Z');
  await record('other', 'other-1', 'completed', '2026-12-01T12:00:00.000Z');
  gateway = await startGateway({
    bus,
    logger: createLogger({ level: 'silent' }),
    tokens: new TokenStore([
      { name: 'curator', sha256: hashToken(TOKENS.curator), scopes: ['submit'] },
      { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
      { name: 'notes-team', sha256: hashToken(TOKENS.notesOnly), scopes: ['submit'], pipelines: ['notes'] },
    ]),
    port: 0,
  });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await bus?.close();
  await nats?.stop();
});

// biome-ignore lint/suspicious/noExplicitAny: the answers are JSON a test picks apart as it likes.
type Json = any;

/** A POST of `body` to a dataset's cases with a token, and its status and JSON body. */
async function add(name: string, body: unknown, token: keyof typeof TOKENS = 'curator') {
  const response = await fetch(`${gateway.url}/v1/evals/datasets/${name}/cases`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKENS[token]}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Json };
}

describe('POST /v1/evals/datasets/{name}/cases', () => {
  it('adds the tasks named as cases of a new dataset, their runs whole, and says which it skipped and why', async () => {
    const added = await add('from-runs', { taskIds: ['notes-1', 'notes-3', 'ghost'], description: 'runs' });
    expect(added).toEqual({
      status: 201,
      body: {
        dataset: {
          name: 'from-runs',
          version: 1,
          createdAt: expect.any(String),
          cases: 1,
          recorded: 1,
          description: 'runs',
        },
        added: 1,
        replaced: 0,
        skipped: [
          { taskId: 'notes-3', why: 'it is still running' },
          { taskId: 'ghost', why: 'no task of this id is known on this server' },
        ],
      },
    });
    const stored = Dataset.parse(await new EvalStore(bus).dataset('from-runs'));
    const [only] = stored.cases;
    expect(only).toMatchObject({
      id: 'notes-1',
      goal: 'write notes-1',
      metadata: { team: 'docs' },
      expected: 'note notes-1',
      recording: { taskId: 'notes-1', pipeline: 'notes' },
    });
    // The reply its event kept in part is whole in the recording: the journal's record of it was taken.
    const journal = only?.recording?.journal ?? {};
    expect(Object.keys(journal)).toEqual(['notes-1.write.1.1.model']);
    expect(JSON.stringify(journal)).toContain(JSON.stringify(LONG).slice(1, -1));
    expect(only?.recording?.events.map((e) => e.kind)).toEqual([
      'task.accepted',
      'step.started',
      'llm.response',
      'step.completed',
      'task.completed',
    ]);
  });

  it("stores the next version from a pipeline's ended tasks: the previous cases kept, the same id replaced", async () => {
    const added = await add('from-runs', {
      pipeline: 'notes',
      status: 'completed',
      since: '2026-11-30T00:00:00Z',
    });
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({
      dataset: { name: 'from-runs', version: 2, cases: 2, recorded: 2, description: 'runs' },
      previousVersion: 1,
      added: 1,
      replaced: 1,
      skipped: [],
    });
    const stored = await new EvalStore(bus).dataset('from-runs');
    // Newest first, as the CLI takes them; the replaced case stays in its place.
    expect(stored?.cases.map((c) => c.id)).toEqual(['notes-1', 'notes-2']);
    expect((await new EvalStore(bus).dataset('from-runs', 1))?.cases.map((c) => c.id)).toEqual(['notes-1']);
  });

  it('keeps both adds to one dataset made at once: each reads the version the other stored', async () => {
    const [first, second] = await Promise.all([
      add('at-once', { taskIds: ['notes-1'] }),
      add('at-once', { taskIds: ['notes-2'] }),
    ]);
    expect([first.status, second.status]).toEqual([201, 201]);
    expect([first.body.dataset.version, second.body.dataset.version].sort()).toEqual([1, 2]);
    const newest = await new EvalStore(bus).dataset('at-once');
    expect(newest?.version).toBe(2);
    expect(newest?.cases.map((c) => c.id).sort()).toEqual(['notes-1', 'notes-2']);
  });

  it('refuses a token without the submit scope, and one limited to some pipelines, storing nothing', async () => {
    const reader = await add('from-runs', { taskIds: ['notes-2'] }, 'reader');
    expect(reader.status).toBe(403);
    expect(reader.body.error.message).toBe('token watcher lacks the submit scope (it has read)');
    // A dataset may hold any pipeline's runs: a token of notes alone adds to none, its own pipeline's runs neither.
    const refusal =
      'token notes-team may touch only pipelines notes; datasets may hold runs of any pipeline, so only a token without a pipeline list adds to them';
    for (const body of [{ taskIds: ['notes-2'] }, { pipeline: 'notes' }, { taskIds: ['other-1'] }]) {
      for (const name of ['notes-team', 'from-runs']) {
        const refused = await add(name, body, 'notesOnly');
        expect(refused, `${name} ${JSON.stringify(body)}`).toEqual({
          status: 403,
          body: { error: { code: 'forbidden', message: refusal } },
        });
      }
    }
    const store = new EvalStore(bus);
    expect(await store.dataset('notes-team')).toBeUndefined();
    expect((await store.dataset('from-runs'))?.version).toBe(2);
  });

  it('says what is wrong with a request, storing nothing', async () => {
    const cases: [unknown, string][] = [
      [
        {},
        'say which runs to add: taskIds (a list of task ids), or pipeline (with status, since and limit to choose among its ended tasks)',
      ],
      [
        { taskIds: ['notes-1'], status: 'completed', limit: 3 },
        "status, limit choose among a pipeline's tasks; with taskIds the tasks named are taken whatever their status or age: give one or the other",
      ],
      [
        { pipeline: 'note' },
        'nothing to add to dataset bad-asks: no task of pipeline note is known on this server; tasks are of: notes, other; no version was stored',
      ],
      [
        { pipeline: 'notes', status: 'failed' },
        'nothing to add to dataset bad-asks: no failed task of pipeline notes; no version was stored',
      ],
    ];
    for (const [body, message] of cases) {
      const refused = await add('bad-asks', body);
      expect(refused, JSON.stringify(body)).toEqual({
        status: 400,
        body: { error: { code: 'invalid_request', message } },
      });
    }
    const shape = await add('bad-asks', { taskIds: [], pipelin: 'notes' });
    expect(shape.status).toBe(400);
    expect(shape.body.error.message).toMatch(/body\.taskIds: .*1/);
    expect(shape.body.error.message).toMatch(/pipelin/);
    const name = await add('Bad_Name', { taskIds: ['notes-1'] });
    expect(name.status).toBe(400);
    expect(name.body.error.message).toMatch(/^params\.name: /);
    expect(await new EvalStore(bus).dataset('bad-asks')).toBeUndefined();
  });

  it('is in the OpenAPI document with its body and answer', () => {
    const doc = gateway.openapi() as {
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.paths['/v1/evals/datasets/{name}/cases']).toHaveProperty('post');
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(['AddRunsToDataset', 'AddedRuns']),
    );
  });
});
