import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import type { ToolProgressUpdate } from '../../src/tools/progressThrottle.ts';
import { defineTool, type Tool, type ToolContext, type ToolProgress } from '../../src/tools/tool.ts';
import { ToolExecutor, type ToolExecutorOptions } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

type Seen = { callId: string; tool: string } & ToolProgressUpdate;

/** A tool that reports each update of `updates` at once, then waits `thenMs` before answering. */
function reporting(updates: ToolProgress[], thenMs = 0): Tool {
  return defineTool({
    name: 'work',
    description: 'Reports progress',
    input: z.object({}),
    async run(_input, ctx) {
      for (const update of updates) ctx.progress?.(update);
      if (thenMs > 0) await new Promise((resolve) => setTimeout(resolve, thenMs));
      return 'worked';
    },
  });
}

function executor(tool: Tool, overrides: Partial<ToolExecutorOptions> = {}): ToolExecutor {
  const registry = new ToolRegistry();
  registry.register(tool);
  return new ToolExecutor({
    registry,
    policy: { tools: [tool.name], rules: [] },
    agent: 'coder',
    workspace: '/nonexistent',
    taskId: 'task-1',
    ...overrides,
  });
}

const listener = () => {
  const seen: Seen[] = [];
  const onProgress = (callId: string, tool: string, update: ToolProgressUpdate) =>
    seen.push({ callId, tool, ...update });
  return { seen, onProgress };
};

const work = (id = 'call-1') => ({ id, name: 'work', arguments: '{}' });

afterEach(() => {
  vi.useRealTimers();
});

describe('ToolExecutor progress', () => {
  it('gives tools ctx.progress only when the executor has an onProgress listener', async () => {
    const contexts: ToolContext[] = [];
    const tool = defineTool({
      name: 'work',
      description: 'Looks at its context',
      input: z.object({}),
      run: async (_input, ctx) => {
        contexts.push(ctx);
        return 'ok';
      },
    });
    await executor(tool).execute(work());
    await executor(tool, { onProgress: () => {} }).execute(work());
    expect(contexts.map((ctx) => typeof ctx.progress)).toEqual(['undefined', 'function']);
  });

  it('publishes the first update at once and the last before the result, dropping those in between', async () => {
    const { seen, onProgress } = listener();
    const updates = [1, 2, 3, 4, 5].map((n) => ({ progress: n, total: 5, message: `item ${n}` }));
    const result = await executor(reporting(updates), { onProgress }).execute(work('call-7'));
    expect(result).toMatchObject({ ok: true, output: 'worked' });
    expect(seen).toEqual([
      { callId: 'call-7', tool: 'work', seq: 0, progress: 1, total: 5, message: 'item 1' },
      { callId: 'call-7', tool: 'work', seq: 1, progress: 5, total: 5, message: 'item 5' },
    ]);
  });

  it('publishes the latest waiting update when 250 ms are over, while the call goes on', async () => {
    vi.useFakeTimers();
    const { seen, onProgress } = listener();
    const tool = reporting([{ progress: 1 }, { progress: 2 }, { progress: 3 }], 10_000);
    const running = executor(tool, { onProgress, now: () => Date.now() }).execute(work());
    await vi.advanceTimersByTimeAsync(249);
    expect(seen.map((update) => update.progress)).toEqual([1]);
    await vi.advanceTimersByTimeAsync(1);
    expect(seen.map((update) => [update.seq, update.progress])).toEqual([
      [0, 1],
      [1, 3],
    ]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect((await running).ok).toBe(true);
    expect(seen).toHaveLength(2);
  });

  it('numbers each call from 0 on its own', async () => {
    const { seen, onProgress } = listener();
    const run = executor(reporting([{ progress: 1 }]), { onProgress });
    await run.executeAll([work('a'), work('b')]);
    expect(seen.map((update) => [update.callId, update.seq])).toEqual([
      ['a', 0],
      ['b', 0],
    ]);
  });

  it('drops updates without a finite progress, cuts messages to 1000 characters, ignores late reports', async () => {
    const { seen, onProgress } = listener();
    let late: ((update: ToolProgress) => void) | undefined;
    const tool = defineTool({
      name: 'work',
      description: 'Reports oddly',
      input: z.object({}),
      async run(_input, ctx) {
        ctx.progress?.({ progress: Number.NaN });
        ctx.progress?.({ progress: 1, total: Number.POSITIVE_INFINITY, message: 'x'.repeat(5000) });
        late = ctx.progress;
        return 'done';
      },
    });
    await executor(tool, { onProgress }).execute(work());
    late?.({ progress: 2 });
    expect(seen).toEqual([
      { callId: 'call-1', tool: 'work', seq: 0, progress: 1, message: 'x'.repeat(1000) },
    ]);
  });

  it('runs the call to its end when the listener throws', async () => {
    let attempts = 0;
    const onProgress = () => {
      attempts += 1;
      throw new Error('bus down');
    };
    const result = await executor(reporting([{ progress: 1 }, { progress: 2 }]), { onProgress }).execute(
      work(),
    );
    expect(result).toMatchObject({ ok: true, output: 'worked' });
    expect(attempts).toBe(2);
  });
});
