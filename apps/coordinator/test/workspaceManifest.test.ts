import type { WorkspaceChanges } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { failedReply, pipelineOf, type Reply, run, text } from './support/runFlow.ts';

const flow = (steps: unknown[]) => pipelineOf(['planner', 'writer', 'tester', 'builder', 'closer'], steps);
const file = (digit: string) => ({ bytes: 1, sha256: digit.repeat(64) });
/** A reply that hands on these workspace changes. */
const withFiles = (reply: Reply, files: Record<string, string>, removed: string[] = []): Reply => {
  const workspace: WorkspaceChanges = {
    files: Object.fromEntries(Object.entries(files).map(([path, digit]) => [path, file(digit)])),
    removed,
  };
  return { ...reply, workspace } as Reply;
};

/** A reply the test lets go when it wants, so it chooses the order steps end in. */
function held() {
  let release: (reply: Reply) => void = () => {};
  const state = { asked: false };
  const reply = () => {
    state.asked = true;
    return new Promise<Reply>((resolve) => (release = resolve));
  };
  return { reply, state, release: (r: Reply) => release(r) };
}

describe("the task's workspace manifest", () => {
  it("sends each step the files earlier steps handed on, a failed step's included", async () => {
    let tries = 0;
    const steps = [
      { id: 'plan', kind: 'agent', agent: 'planner' },
      { id: 'write', kind: 'agent', agent: 'writer', retry: { max: 1, backoff: 0.01 } },
      { id: 'close', kind: 'agent', agent: 'closer' },
    ];
    const { output, calls } = await run(flow(steps), {
      planner: () => withFiles(text('plan'), { 'plan.md': 'a', 'scratch.txt': 'b' }),
      writer: () => {
        tries += 1;
        return tries === 1
          ? withFiles(failedReply('half done'), { 'draft.md': 'c' })
          : withFiles(text('written'), { 'draft.md': 'd' }, ['scratch.txt']);
      },
      closer: () => text('closed'),
    });
    expect(output.status).toBe('completed');
    expect(calls('planner')[0]?.workspace).toBeUndefined();
    expect(calls('writer').map((r) => r.workspace)).toEqual([
      { 'plan.md': file('a'), 'scratch.txt': file('b') },
      // The retry goes on from the file its failed run left.
      { 'plan.md': file('a'), 'scratch.txt': file('b'), 'draft.md': file('c') },
    ]);
    expect(calls('closer')[0]?.workspace).toEqual({ 'plan.md': file('a'), 'draft.md': file('d') });
  });

  it('merges parallel branches in the order they end: the last to end wins a path both wrote', async () => {
    const writer = held();
    const tester = held();
    const steps = [
      { id: 'plan', kind: 'agent', agent: 'planner' },
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          docs: [{ id: 'write', kind: 'agent', agent: 'writer' }],
          tests: [{ id: 'test', kind: 'agent', agent: 'tester' }],
        },
      },
      { id: 'close', kind: 'agent', agent: 'closer' },
    ];
    const started = run(flow(steps), {
      planner: () => withFiles(text('plan'), { 'shared.log': '0' }),
      writer: writer.reply,
      tester: tester.reply,
      closer: () => text('closed'),
    });
    await expect.poll(() => writer.state.asked && tester.state.asked).toBe(true);
    tester.release(withFiles(text('tested'), { 'tests.txt': 't', 'shared.log': '1' }));
    await new Promise((resolve) => setImmediate(resolve));
    writer.release(withFiles(text('written'), { 'docs.md': 'd', 'shared.log': '2' }));
    const { output, calls } = await started;
    expect(output.status).toBe('completed');
    expect(calls('writer')[0]?.workspace).toEqual({ 'shared.log': file('0') });
    expect(calls('closer')[0]?.workspace).toEqual({
      'shared.log': file('2'),
      'tests.txt': file('t'),
      'docs.md': file('d'),
    });
  });

  it("hands a foreach item's files to the steps after the foreach step", async () => {
    const steps = [
      { id: 'plan', kind: 'agent', agent: 'planner' },
      {
        id: 'each',
        kind: 'foreach',
        items: 'steps.plan.output.parts',
        maxItems: 5,
        concurrency: 1,
        do: [{ id: 'build', kind: 'agent', agent: 'builder' }],
      },
      { id: 'close', kind: 'agent', agent: 'closer' },
    ];
    const { output, calls } = await run(flow(steps), {
      planner: () => withFiles(text(JSON.stringify({ parts: ['a', 'b'] })), { 'plan.md': 'p' }),
      builder: (request) => {
        const item = request.input?.item as string;
        return withFiles(text(`built ${item}`), { [`out/${item}.txt`]: item === 'a' ? 'a' : 'b' });
      },
      closer: () => text('closed'),
    });
    expect(output.status).toBe('completed');
    // The second item starts from the files the first handed on.
    expect(calls('builder').map((r) => Object.keys(r.workspace ?? {}).sort())).toEqual([
      ['plan.md'],
      ['out/a.txt', 'plan.md'],
    ]);
    expect(calls('closer')[0]?.workspace).toEqual({
      'plan.md': file('p'),
      'out/a.txt': file('a'),
      'out/b.txt': file('b'),
    });
  });
});
