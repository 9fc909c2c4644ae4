import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { KvStore, MemoryBus, MemoryKv } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { loadPipeline } from '../../src/config/loadPipeline.ts';
import { HeldRecords } from '../../src/inProcess/heldRecords.ts';
import { LEASES_PER_STACK, leaseStack } from '../../src/inProcess/inProcessStack.ts';
import { runTask } from '../../src/inProcessRun.ts';

// Counts the loads and flow compilations the runs below cause, while doing them as usual.
const counted = vi.hoisted(() => ({ loads: 0, compiles: 0 }));
vi.mock('../../src/config/loadPipeline.ts', async (original) => {
  const actual = await original<typeof import('../../src/config/loadPipeline.ts')>();
  return {
    ...actual,
    loadPipeline: (...args: Parameters<typeof actual.loadPipeline>) => {
      counted.loads += 1;
      return actual.loadPipeline(...args);
    },
  };
});
vi.mock('../../src/workflow/compileFlow.ts', async (original) => {
  const actual = await original<typeof import('../../src/workflow/compileFlow.ts')>();
  return {
    ...actual,
    compileFlow: (...args: Parameters<typeof actual.compileFlow>) => {
      counted.compiles += 1;
      return actual.compileFlow(...args);
    },
  };
});

const examples = join(import.meta.dirname, '..', '..', '..', '..', 'examples');

let root: string;
let demo: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'troupe-in-process-stack-'));
  // A copy of the demo, so a test can change the file; its script is read from beside it.
  demo = join(root, 'demo.yaml');
  const text = await readFile(join(examples, 'demo.yaml'), 'utf8');
  await writeFile(demo, text);
  for (const line of text.split('\n')) {
    const script = /script:\s*\.\/(\S+?)\s*[,}]?\s*$/.exec(line)?.[1];
    if (script) await copyFile(join(examples, script), join(root, script));
  }
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const completes = async (pipeline: Parameters<typeof runTask>[0]['pipeline'], workspaceRoot = root) =>
  expect((await runTask({ pipeline, goal: 'Write a hello note', workspaceRoot })).final.kind).toBe(
    'task.completed',
  );

describe('in-process runs share what they can', () => {
  it('runs of one path load the file and compile its flow once; a change to the file loads it again', async () => {
    counted.loads = 0;
    counted.compiles = 0;
    for (let i = 0; i < 3; i++) await completes(demo);
    expect(counted).toEqual({ loads: 1, compiles: 1 });

    await writeFile(demo, `${await readFile(demo, 'utf8')}\n# changed\n`);
    await completes(demo);
    expect(counted).toEqual({ loads: 2, compiles: 2 });
  });

  it('runs of one loaded pipeline compile its flow once; another workspace root gets a stack of its own', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    counted.compiles = 0;
    await completes(loaded);
    await completes(loaded);
    expect(counted.compiles).toBe(1);
    const elsewhere = await mkdtemp(join(root, 'other-'));
    await completes(loaded, elsewhere);
    expect(counted.compiles).toBe(2);
  });

  it('runs at once on one stack each end with their own events only', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    counted.compiles = 0;
    const runs = await Promise.all(
      ['at-once-1', 'at-once-2', 'at-once-3', 'at-once-4'].map(async (taskId) => {
        const events: TroupeEvent[] = [];
        const { final } = await runTask({
          pipeline: loaded,
          goal: 'Write a hello note',
          taskId,
          workspaceRoot: root,
          onEvent: (event) => events.push(event),
        });
        return { taskId, final, events };
      }),
    );
    expect(counted.compiles).toBe(1);
    for (const { taskId, final, events } of runs) {
      expect(final.kind).toBe('task.completed');
      expect(final.taskId).toBe(taskId);
      expect(events.every((event) => event.taskId === taskId)).toBe(true);
      expect(events.filter((event) => event.kind === 'step.completed')).toHaveLength(5);
    }
  });

  it('a task id run before on the stack runs again in full, as it did on a stack of its own', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const kinds: string[][] = [];
    for (let i = 0; i < 2; i++) {
      const events: TroupeEvent[] = [];
      const { final } = await runTask({
        pipeline: loaded,
        goal: 'Write a hello note',
        taskId: 'same-id',
        workspaceRoot: root,
        onEvent: (event) => events.push(event),
      });
      expect(final.kind).toBe('task.completed');
      kinds.push(events.map((event) => event.kind));
    }
    expect(kinds[1]).toEqual(kinds[0]);
    expect(kinds[1]?.filter((kind) => kind === 'llm.response').length).toBeGreaterThan(0);
  });

  it('a stack is given to LEASES_PER_STACK runs, then stopped once the last is over, and runs get a new one', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const settings = { workspaceRoot: root, approvals: 'deny' as const, logger: undefined };
    const leases = [];
    for (let i = 0; i < LEASES_PER_STACK; i++) leases.push(await leaseStack(loaded, settings));
    const first = leases[0]?.stack;
    expect(leases.every((lease) => lease.stack === first)).toBe(true);
    const next = await leaseStack(loaded, settings);
    expect(next.stack).not.toBe(first);
    for (const lease of leases.slice(1)) lease.release();
    expect(first?.stopped).toBe(false);
    leases[0]?.release();
    // At once, not after the idle second.
    await expect.poll(() => first?.stopped, { timeout: 500, interval: 10 }).toBe(true);
    next.release();
    expect(next.stack.stopped).toBe(false);
  });

  it('a stack nobody uses is stopped, and the next run builds another', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const settings = { workspaceRoot: root, approvals: 'deny' as const, logger: undefined };
    const first = await leaseStack(loaded, settings);
    const second = await leaseStack(loaded, settings);
    expect(second.stack).toBe(first.stack);
    first.release();
    second.release();
    await expect.poll(() => first.stack.stopped, { timeout: 5_000 }).toBe(true);
    const next = await leaseStack(loaded, settings);
    next.release();
    expect(next.stack).not.toBe(first.stack);
    expect(next.stack.stopped).toBe(false);
  });
});

describe('in-process runs store nothing', () => {
  it('writes no KV bucket: the task record is held in memory as the object the task made, then dropped', async () => {
    const loaded = await loadPipeline(demo, { toolNames: builtinTools().names() });
    const writes = [
      vi.spyOn(MemoryKv.prototype, 'put'),
      vi.spyOn(MemoryKv.prototype, 'create'),
      vi.spyOn(MemoryKv.prototype, 'update'),
      vi.spyOn(KvStore.prototype, 'put'),
      vi.spyOn(KvStore.prototype, 'create'),
      vi.spyOn(KvStore.prototype, 'update'),
    ];
    // The same stack runTask leases (same pipeline and settings), to look at its records mid-run.
    const lease = await leaseStack(loaded, { workspaceRoot: root, approvals: 'deny', logger: undefined });
    const heldMidRun: (WorkflowRecord | undefined)[] = [];
    try {
      const events: TroupeEvent[] = [];
      const { final } = await runTask({
        pipeline: loaded,
        goal: 'Write a hello note',
        taskId: 'held-1',
        workspaceRoot: root,
        onEvent: (event) => {
          events.push(event);
          // Read once the workflow is through with the turn that ended the step (its record is written after it).
          if (event.kind === 'step.completed')
            setImmediate(
              () => void lease.stack.records.get('held-1').then((entry) => heldMidRun.push(entry?.value)),
            );
        },
      });
      expect(final.kind).toBe('task.completed');
      for (const write of writes) expect(write).not.toHaveBeenCalled();
      await expect.poll(() => heldMidRun.length).toBe(5);
      // Each step's end finds the record held; the last one's, the task's ending already recorded.
      expect(heldMidRun.map((record) => record?.status)).toEqual([
        'running',
        'running',
        'running',
        'running',
        'completed',
      ]);
      expect(lease.stack.records.size).toBe(0);
    } finally {
      lease.release();
      for (const write of writes) write.mockRestore();
    }
  });
});

describe('HeldRecords', () => {
  it('keeps the very record given, fences writes by revision as a bucket does, and forgets on demand', async () => {
    const records = new HeldRecords();
    const record = { status: 'running' } as unknown as WorkflowRecord;
    const first = await records.create('t-1', record);
    expect(first).toBeDefined();
    expect(await records.create('t-1', record)).toBeUndefined();
    expect((await records.get('t-1'))?.value).toBe(record);
    const next = { status: 'completed' } as unknown as WorkflowRecord;
    expect(await records.update('t-1', next, (first ?? 0) + 1)).toBeUndefined();
    const second = await records.update('t-1', next, first ?? 0);
    expect(second).toBeGreaterThan(first ?? 0);
    expect(await records.get('t-1')).toEqual({ key: 't-1', value: next, revision: second });
    records.forget('t-1');
    expect(await records.get('t-1')).toBeUndefined();
    expect(records.size).toBe(0);
  });
});

describe('in-process steps', () => {
  it('hands every step to the agent host directly: no step request, reply or heartbeat on the bus', async () => {
    const subjectsSent: string[] = [];
    const publish = vi.spyOn(MemoryBus.prototype, 'publish');
    const requestReplies = vi.spyOn(MemoryBus.prototype, 'requestReplies');
    try {
      const events: TroupeEvent[] = [];
      const { final } = await runTask({
        pipeline: demo,
        goal: 'Write a hello note',
        workspaceRoot: root,
        onEvent: (event) => events.push(event),
      });
      expect(final.kind).toBe('task.completed');
      expect(events.filter((event) => event.kind === 'step.completed')).toHaveLength(5);
      for (const call of [...publish.mock.calls, ...requestReplies.mock.calls]) subjectsSent.push(call[0]);
      expect(subjectsSent.filter((subject) => subject.startsWith('troupe.agents.'))).toEqual([]);
      expect(
        subjectsSent.filter((subject) => subject.startsWith('_INBOX') || subject.includes('inbox')),
      ).toEqual([]);
    } finally {
      publish.mockRestore();
      requestReplies.mockRestore();
    }
  });
});
