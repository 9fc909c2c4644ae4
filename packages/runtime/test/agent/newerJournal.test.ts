import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type ModelProvider, type ModelRequest, Script, ScriptedProvider } from '@troupe/llm';
import { type AgentStepRequest, isRetryable } from '@troupe/protocol';
import { MemoryKv } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAgentStep, type StepDeps } from '../../src/agent/agentStep.ts';
import { JournalRecord, NewerJournalRecordError } from '../../src/durable/newerJournalRecord.ts';
import { StepJournal } from '../../src/durable/stepJournal.ts';
import { systemClock } from '../../src/events/clock.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { fileTools, ToolRegistry } from '../../src/tools/index.ts';

const request: AgentStepRequest = {
  stepId: 'task-1.code.1',
  taskId: 'task-1',
  pipeline: 'demo',
  agent: 'coder',
  step: 'code',
  round: 1,
  goal: 'write notes/hello.md',
  context: [],
  expect: 'text',
};

/** What a later release might record, which this one does not know. */
const newer = { kind: 'model.plan', plan: ['write notes/hello.md'], recordedAt: '2027-01-01T00:00:00.000Z' };

function countingModel(script: unknown): { model: ModelProvider; asked: ModelRequest[] } {
  const inner = new ScriptedProvider(Script.parse(script));
  const asked: ModelRequest[] = [];
  return {
    asked,
    model: {
      provider: inner.provider,
      model: inner.model,
      complete: (req) => {
        asked.push(req);
        return inner.complete(req);
      },
    },
  };
}

describe('a step journal holding a record only a newer host knows', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'troupe-newer-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  function deps(kv: MemoryKv<JournalRecord>): StepDeps {
    const registry = new ToolRegistry();
    for (const tool of fileTools) registry.register(tool);
    return {
      registry,
      workspaceRoot: root,
      clock: systemClock,
      events: new EventFactory(systemClock),
      publish: () => {},
      journal: new StepJournal(kv),
    };
  }

  const coder = (model: ModelProvider) => ({
    name: 'coder',
    instructions: 'You write files.',
    model,
    tools: ['write_file'],
    rules: [],
    maxTurns: 5,
  });

  it('fails the step retryably, saying a newer host wrote it and to upgrade, and asks the model nothing', async () => {
    const kv = new MemoryKv<JournalRecord>();
    await kv.put(StepJournal.modelKey(request.stepId, 1), newer);
    const { model, asked } = countingModel({ agents: { coder: [{ content: 'wrote it again' }] } });

    const reply = await runAgentStep(coder(model), request, deps(kv));

    expect(reply).toMatchObject({
      ok: false,
      error: {
        code: 'journal_unavailable',
        message: expect.stringMatching(
          /^agent coder: journal record task-1\.code\.1\.1\.model is of kind "model\.plan", which this Troupe host does not know: a newer Troupe host wrote it \(journal_from_newer_host\)\. Upgrade this host/,
        ),
      },
    });
    expect(reply.ok || isRetryable(reply.error.code)).toBe(true);
    expect(asked).toHaveLength(0);
    // Left as the newer host wrote it, for a host that can read it.
    expect((await kv.get(StepJournal.modelKey(request.stepId, 1)))?.value).toEqual(newer);
  });

  it('fails the step before a tool call whose record a newer host wrote, and runs nothing', async () => {
    const kv = new MemoryKv<JournalRecord>();
    const script = {
      agents: {
        coder: [
          { toolCalls: [{ id: 'w', name: 'write_file', arguments: { path: 'a.md', content: 'A' } }] },
          { content: 'done' },
        ],
      },
    };
    const first = countingModel(script);
    // A first run journals its turns and its tool call; then a newer host's run records that call its own way.
    const ran = await runAgentStep(coder(first.model), request, deps(kv));
    expect(ran).toMatchObject({ ok: true, output: 'done' });
    await kv.put(StepJournal.toolKey(request.stepId, 1, 0), newer);
    await rm(path.join(root, 'demo', 'task-1', 'a.md'));

    const again = countingModel(script);
    const reply = await runAgentStep(coder(again.model), request, deps(kv));

    expect(reply).toMatchObject({
      ok: false,
      error: {
        code: 'journal_unavailable',
        message: expect.stringContaining('a newer Troupe host wrote it'),
      },
    });
    // Its first turn came from the journal; the call was not run again.
    expect(again.asked).toHaveLength(0);
    await expect(rm(path.join(root, 'demo', 'task-1', 'a.md'))).rejects.toThrow();
  });

  it('reads a record of a kind it does not know as such (a known kind that does not fit stays unreadable), and counts none of it as spent', async () => {
    expect(JournalRecord.safeParse(newer)).toMatchObject({ success: true, data: newer });
    expect(JournalRecord.safeParse({ kind: 'tool.result', tool: 3 }).success).toBe(false);
    expect(JournalRecord.safeParse({ kind: 'people', requestIds: ['a'] })).toMatchObject({ success: true });

    const kv = new MemoryKv<JournalRecord>();
    await kv.put('task-2.code.1.1.model', newer);
    const journal = new StepJournal(kv);
    const read = journal.entry('task-2.code.1.1.model');
    await expect(read).rejects.toBeInstanceOf(NewerJournalRecordError);
    await expect(read).rejects.toMatchObject({
      code: 'journal_from_newer_host',
      key: 'task-2.code.1.1.model',
      kind: 'model.plan',
    });
    expect(await journal.spent('task-2.code.1')).toMatchObject({ modelCalls: 0 });
  });
});
