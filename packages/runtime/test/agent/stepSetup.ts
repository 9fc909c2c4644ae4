import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type ModelProvider, Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import type { StepDeps } from '../../src/agent/agentStep.ts';
import { systemClock } from '../../src/events/clock.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { askHumanTool } from '../../src/tools/askHumanTool.ts';
import { fileTools, ToolRegistry } from '../../src/tools/index.ts';

/** What `runAgentStep` tests share: a coder's step that writes notes/hello.md, its agent, its model and its deps. */

/** The step a coder is asked to run: task-1's `code`, round 1, writing notes/hello.md. */
export const codeStep = (extra: Partial<AgentStepRequest> = {}): AgentStepRequest => ({
  stepId: 'task-1.code.1',
  taskId: 'task-1',
  pipeline: 'demo',
  agent: 'coder',
  step: 'code',
  round: 1,
  goal: 'write notes/hello.md',
  context: [],
  expect: 'text',
  ...extra,
});

/** A coder that may write files, with `model`; nobody to ask and no rules unless `overrides` say. */
export const coder = (model: ModelProvider, overrides: Partial<AgentDefinition> = {}): AgentDefinition => ({
  name: 'coder',
  instructions: 'You write files.',
  model,
  tools: ['write_file'],
  rules: [],
  maxTurns: 5,
  ...overrides,
});

/** The scripted coder's two calls: write notes/hello.md, then say so. */
export const writesHello = (model = 'scripted'): ScriptedProvider =>
  new ScriptedProvider(
    Script.parse({
      agents: {
        coder: [
          {
            toolCalls: [
              { id: 'call-w', name: 'write_file', arguments: { path: 'notes/hello.md', content: '# Hi' } },
            ],
          },
          { content: 'Wrote notes/hello.md' },
        ],
      },
    }),
    model,
  );

const workspaces: string[] = [];

/** Removes the workspaces `stepDeps` made; for `afterEach`. */
export async function removeWorkspaces(): Promise<void> {
  await Promise.all(workspaces.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
}

/**
 * A step's deps over a fresh workspace (removed by `removeWorkspaces`), with the file tools and ask_human, the
 * system clock, and the events published kept in `events`.
 */
export async function stepDeps(
  overrides: Partial<StepDeps> = {},
): Promise<{ deps: StepDeps; events: TroupeEvent[] }> {
  const registry = new ToolRegistry();
  for (const tool of [...fileTools, askHumanTool]) registry.register(tool);
  const root = await mkdtemp(path.join(os.tmpdir(), 'troupe-step-'));
  workspaces.push(root);
  const events: TroupeEvent[] = [];
  return {
    events,
    deps: {
      registry,
      workspaceRoot: root,
      clock: systemClock,
      events: new EventFactory(systemClock),
      publish: (event) => events.push(event),
      ...overrides,
    },
  };
}
