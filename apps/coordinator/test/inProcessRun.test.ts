import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../src/config/builtinTools.ts';
import { loadPipeline } from '../src/config/loadPipeline.ts';
import { runTask } from '../src/inProcessRun.ts';

const demo = join(import.meta.dirname, '..', '..', '..', 'examples', 'demo.yaml');

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'troupe-in-process-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('runTask: one task in-process, no server', () => {
  it("runs the demo to the same events and result as a NATS run of it (test/pipeline.test.ts's)", async () => {
    const events: TroupeEvent[] = [];
    const { final } = await runTask({
      pipeline: demo,
      goal: 'Write a hello note',
      taskId: 'inproc-1',
      workspaceRoot: root,
      onEvent: (event) => events.push(event),
    });
    expect(final.kind).toBe('task.completed');
    // The flow test/pipeline.test.ts expects of the same task run by a coordinator on NATS.
    const flow = events
      .filter((e) => ['task.accepted', 'agent.handoff', 'step.completed', 'task.completed'].includes(e.kind))
      .map((e) =>
        e.kind === 'step.completed'
          ? `${e.kind}:${e.data.step}:${e.data.verdict?.decision ?? 'ok'}`
          : `${e.kind}:${e.from}>${e.to}`,
      );
    expect(flow).toEqual([
      'task.accepted:user>demo',
      'agent.handoff:task>planner',
      'step.completed:plan:ok',
      'agent.handoff:planner>executor',
      'step.completed:execute:ok',
      'agent.handoff:executor>reviewer',
      'step.completed:review:reject',
      'agent.handoff:reviewer>executor',
      'step.completed:execute:ok',
      'agent.handoff:executor>reviewer',
      'step.completed:review:approve',
      'task.completed:workflow>user',
    ]);
    expect(events.at(-1)).toEqual(final);
    if (final.kind !== 'task.completed') return;
    expect(final.data.rounds).toBe(2);
    expect(final.data.output).toContain('sign-off');
    const responses = events.filter((e) => e.kind === 'llm.response');
    expect(final.data.usage.modelCalls).toBe(responses.length);
    // Each event once (its own id), all of one trace, as on NATS.
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
    expect(new Set(events.map((e) => e.traceparent.split('-')[1])).size).toBe(1);
    // The step's files are in the workspace asked for.
    expect(await readFile(join(root, 'demo', 'inproc-1', 'notes', 'hello.md'), 'utf8')).toContain(
      'reviewed and approved',
    );
  });

  it('goes on past an onEvent that throws, to the task’s own end and result', async () => {
    const { final } = await runTask({
      pipeline: demo,
      goal: 'Write a hello note',
      workspaceRoot: root,
      onEvent: () => {
        throw new Error('a listener that fails');
      },
    });
    expect(final.kind).toBe('task.completed');
  });

  it('cancels the task when its signal aborts', async () => {
    const abort = new AbortController();
    const { final } = await runTask({
      pipeline: demo,
      goal: 'Write a hello note',
      workspaceRoot: root,
      signal: abort.signal,
      onEvent: (event) => {
        if (event.kind === 'step.completed') abort.abort();
      },
    });
    expect(final.kind).toBe('task.cancelled');
  });

  it('says why a task it was given was refused (here, an input its pipeline’s schema does not take)', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const pipeline = {
      ...loaded,
      config: {
        ...loaded.config,
        input: { type: 'object', required: ['ticket'], properties: { ticket: { type: 'string' } } },
      },
    };
    await expect(
      runTask({ pipeline, goal: 'Write a hello note', taskId: 'refused-1', workspaceRoot: root }),
    ).rejects.toThrow(/^task refused-1 of pipeline demo was refused: .*ticket/);
    // The same stack runs a task that fits.
    const { final } = await runTask({
      pipeline,
      goal: 'Write a hello note',
      input: { ticket: 'T-1' },
      workspaceRoot: root,
    });
    expect(final.kind).toBe('task.completed');
  });

  it('cancels the task when its signal aborted before the run began, or as it began: the cancel is not lost', async () => {
    // The runner hears a cancel only once the task's actor listens for signals (after triage and the claim): one sent
    // before is answered by nobody, and the task ran whole.
    const aborted = new AbortController();
    aborted.abort();
    const early = await runTask({
      pipeline: demo,
      goal: 'Write a hello note',
      workspaceRoot: root,
      signal: aborted.signal,
    });
    expect(early.final.kind).toBe('task.cancelled');
    const abort = new AbortController();
    const kinds: string[] = [];
    const { final } = await runTask({
      pipeline: demo,
      goal: 'Write a hello note',
      workspaceRoot: root,
      signal: abort.signal,
      onEvent: (event) => {
        kinds.push(event.kind);
        if (event.kind === 'task.accepted') abort.abort();
      },
    });
    expect(final.kind).toBe('task.cancelled');
    expect(kinds.filter((kind) => kind === 'step.completed').length).toBeLessThan(5);
    // Sent again with each event until answered, it still ends the task once.
    expect(kinds.filter((kind) => kind.startsWith('task.') && kind !== 'task.accepted')).toEqual([
      'task.cancelled',
    ]);
  });
});
