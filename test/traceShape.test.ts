import { submitTask } from '@troupe/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { troupe } from './support/cli.ts';
import { fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/**
 * `troupe trace` of a task whose flow has every shape — a route, a parallel step with a failing branch, a foreach,
 * a sub-pipeline — run by a real coordinator over a real nats-server: the tree shows the shape, and `--json` has it.
 */
describe('the trace of a flow with a route, branches, items and a sub-pipeline', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('shaped.yaml'), fixturePath('outline.yaml')]);
    await submitTask(h.bus, 'shaped', { id: 'shaped-1', goal: 'Add an export command' });
    const final = await h.finalOf('shaped-1');
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('says where each step ran, which item it ran for, and which sub-task a pipeline step ran', () => {
    const started = ofKind(h.eventsOf('shaped-1'), 'step.started');
    const of = (step: string) => started.filter((e) => e.data.step === step).map((e) => e.data);
    expect(of('plan')[0]).not.toHaveProperty('within');
    expect(of('docs')[0]?.within).toEqual([{ step: 'build', branch: 'docs' }]);
    expect(of('part').map((d) => d.within)).toEqual([
      [{ step: 'each', item: 0, value: '"parser"' }],
      [{ step: 'each', item: 1, value: '"storage"' }],
    ]);
    expect(of('sub')[0]?.subTask).toEqual({
      taskId: expect.stringMatching(/^shaped-1-sub-1-/),
      pipeline: 'outline',
    });
    const handoffs = ofKind(h.eventsOf('shaped-1'), 'agent.handoff');
    expect(handoffs.find((e) => e.data.step === 'wrap')).toMatchObject({
      from: 'each',
      data: { join: 'each' },
    });
  });

  it('draws the route, the branches and their join, the items, the failed step and the sub-task', async () => {
    const result = await troupe(['trace', 'shaped-1', '--server', h.nats.url]);
    expect(result.code, result.stderr).toBe(0);
    // Each line without its measures (durations, tokens, cost), which vary from run to run.
    const shape = result.stdout
      .trimEnd()
      .split('\n')
      .filter((line) => !/─ model /.test(line))
      .map((line) => line.replace(/ · \d[\d.]* m?s .*$/, '').replace(/ in \d[\d.]* m?s$/, ''));
    const sub = /sub-task (\S+) · outline/.exec(result.stdout)?.[1];
    expect(shape).toEqual([
      expect.stringMatching(/^task shaped-1 · shaped@[0-9a-f]{12} · completed$/),
      'goal: Add an export command',
      '├─ plan · planner · round 1 · ok',
      '├─ route triage → build · "feature" matched',
      '├─ build · parallel · joined (all) · ok',
      '│  ├─ branch code · completed',
      '│  │  └─ code · coder · round 1 · ok',
      expect.stringMatching(/^│ {2}└─ branch docs · failed: .*the docs site is down/),
      expect.stringMatching(/^│ {5}└─ docs · writer · round 1 · failed \(\w+\)$/),
      expect.stringMatching(/^│ {11}\w+: .*the docs site is down/),
      '├─ each · foreach · 2 items, 2 completed · ok',
      '│  ├─ item 0: "parser"',
      '│  │  ├─ hand-off from the join of build → builder (part)',
      '│  │  └─ part · builder · round 1 · ok',
      '│  └─ item 1: "storage"',
      '│     ├─ hand-off from the join of build → builder (part)',
      '│     └─ part · builder · round 1 · ok',
      '├─ hand-off from the join of each → wrapper (wrap)',
      '├─ wrap · wrapper · round 1 · ok',
      '└─ sub · pipeline · round 1 · ok',
      `   └─ sub-task ${sub} · outline · completed`,
      '      └─ outline · outliner · round 1 · ok',
      expect.stringMatching(/^totals: /),
    ]);
  });

  it('gives the same shape as JSON, the sub-task trace in its step', async () => {
    const result = await troupe(['trace', 'shaped-1', '--json', '--server', h.nats.url]);
    expect(result.code, result.stderr).toBe(0);
    const tree = JSON.parse(result.stdout);
    const kinds = tree.flow.map((node: { kind: string; step?: string; stepId?: string }) =>
      node.kind === 'step' ? `step ${node.stepId?.split('.')[1]}` : `${node.kind} ${node.step}`,
    );
    expect(kinds).toEqual([
      'handoff plan',
      'step plan',
      'route triage',
      'handoff code',
      'step code',
      'handoff docs',
      'step docs',
      'branches build',
      'handoff part',
      'step part',
      'handoff part',
      'step part',
      'items each',
      'handoff wrap',
      'step wrap',
      'step sub',
    ]);
    expect(tree.flow.find((n: { kind: string }) => n.kind === 'route')).toMatchObject({
      step: 'triage',
      value: 'feature',
      case: 'feature',
      target: 'build',
    });
    expect(tree.flow.find((n: { kind: string }) => n.kind === 'branches')).toMatchObject({
      step: 'build',
      join: 'all',
      ok: true,
      branches: { code: { status: 'completed' }, docs: { status: 'failed' } },
    });
    expect(tree.flow.find((n: { kind: string }) => n.kind === 'items')).toMatchObject({
      step: 'each',
      items: 2,
      completed: 2,
      ok: true,
    });
    const docs = tree.steps.find((s: { step: string }) => s.step === 'docs');
    expect(docs).toMatchObject({ within: [{ step: 'build', branch: 'docs' }], outcome: { ok: false } });
    const sub = tree.steps.find((s: { step: string }) => s.step === 'sub');
    expect(sub.subTask).toMatchObject({
      pipeline: 'outline',
      trace: { status: 'completed', pipeline: 'outline', steps: [{ step: 'outline', agent: 'outliner' }] },
    });
    expect(sub.subTask.trace.taskId).toBe(sub.subTask.taskId);
  });
});
