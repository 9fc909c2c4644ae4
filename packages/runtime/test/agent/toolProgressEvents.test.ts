import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest, EventOf, TroupeEvent } from '@troupe/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { runAgentStep, type StepDeps } from '../../src/agent/agentStep.ts';
import { systemClock } from '../../src/events/clock.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { defineTool, ToolRegistry } from '../../src/tools/index.ts';

const roots: string[] = [];
afterEach(async () => {
  await Promise.all(roots.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

const request: AgentStepRequest = {
  stepId: 'task-1.copy.1',
  taskId: 'task-1',
  pipeline: 'demo',
  agent: 'copier',
  step: 'copy',
  round: 1,
  goal: 'copy the files',
  context: [],
  expect: 'text',
  traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
};

// Reports two updates back to back: the throttle lets the first through at once and the last before the result.
const copy = defineTool({
  name: 'copy',
  description: 'Copy files',
  input: z.object({}),
  async run(_input, ctx) {
    ctx.progress?.({ progress: 1, total: 2, message: 'copying a.txt' });
    ctx.progress?.({ progress: 2, total: 2, message: 'copying b.txt' });
    return 'copied 2 files';
  },
});

async function step(publish: (event: TroupeEvent) => void) {
  const root = await mkdtemp(path.join(os.tmpdir(), 'troupe-progress-'));
  roots.push(root);
  const registry = new ToolRegistry();
  registry.register(copy);
  const model = new ScriptedProvider(
    Script.parse({
      agents: {
        copier: [{ toolCalls: [{ id: 'call-c', name: 'copy', arguments: {} }] }, { content: 'Done' }],
      },
    }),
  );
  const agent: AgentDefinition = {
    name: 'copier',
    instructions: 'You copy files.',
    model,
    tools: ['copy'],
    rules: [],
    maxTurns: 3,
  };
  const deps: StepDeps = {
    registry,
    workspaceRoot: root,
    clock: systemClock,
    events: new EventFactory(),
    publish,
  };
  return runAgentStep(agent, request, deps);
}

describe('runAgentStep: tool progress', () => {
  it('publishes tool.progress from the tool to the agent, between tool.call and tool.result', async () => {
    const events: TroupeEvent[] = [];
    const reply = await step((event) => events.push(event));
    expect(reply.ok).toBe(true);
    const kinds = events.map((event) => event.kind).filter((kind) => kind.startsWith('tool.'));
    expect(kinds).toEqual(['tool.call', 'tool.progress', 'tool.progress', 'tool.result']);
    const progress = events.filter(
      (event): event is EventOf<'tool.progress'> => event.kind === 'tool.progress',
    );
    expect(progress.map((event) => [event.from, event.to])).toEqual([
      ['tool:copy', 'copier'],
      ['tool:copy', 'copier'],
    ]);
    expect(progress.map((event) => event.data)).toEqual([
      {
        agent: 'copier',
        stepId: 'task-1.copy.1',
        turn: 1,
        index: 0,
        callId: 'call-c',
        tool: 'copy',
        seq: 0,
        progress: 1,
        total: 2,
        message: 'copying a.txt',
      },
      {
        agent: 'copier',
        stepId: 'task-1.copy.1',
        turn: 1,
        index: 0,
        callId: 'call-c',
        tool: 'copy',
        seq: 1,
        progress: 2,
        total: 2,
        message: 'copying b.txt',
      },
    ]);
  });

  it('finishes the step when progress cannot be published', async () => {
    const events: TroupeEvent[] = [];
    let refused = 0;
    const reply = await step((event) => {
      if (event.kind === 'tool.progress') {
        refused += 1;
        throw new Error('NATS is down');
      }
      events.push(event);
    });
    expect(refused).toBe(2);
    expect(reply).toMatchObject({ ok: true, output: 'Done' });
    expect(events.find((event) => event.kind === 'tool.result')).toMatchObject({
      data: { ok: true, output: 'copied 2 files' },
    });
  });
});
