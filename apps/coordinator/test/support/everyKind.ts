import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import type { HumanRunOutput, PipelineRunOutput } from '../../src/workflow/workflowTypes.ts';
import { type RunOptions, type Script, text, usage, verdict } from './runFlow.ts';

/**
 * A pipeline with every step kind (agent with a retry, review, parallel, foreach, an expression route, a router
 * agent, human, pipeline, a `when:` gate), whose script answers from each request alone (never from how many calls
 * came before), so a run restored from any of its checkpoints gets the same replies as the run that took them.
 */
export const everyKind = PipelineConfig.parse({
  version: 1,
  name: 'demo',
  models: { scripted: { provider: 'scripted', script: './demo.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: Object.fromEntries(
    ['planner', 'builder', 'lefty', 'righty', 'worker', 'router', 'reviewer', 'closer'].map((a) => [
      a,
      { instructions: a },
    ]),
  ),
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'build', kind: 'agent', agent: 'builder', retry: { max: 1, backoff: 0.01 } },
    {
      id: 'fan',
      kind: 'parallel',
      join: 'all',
      branches: {
        left: [{ id: 'left', kind: 'agent', agent: 'lefty' }],
        right: [
          { id: 'ask', kind: 'human', prompt: 'Go on?' },
          { id: 'right', kind: 'agent', agent: 'righty' },
        ],
      },
    },
    {
      id: 'each',
      kind: 'foreach',
      items: 'steps.plan.output.parts',
      maxItems: 5,
      concurrency: 2,
      do: [{ id: 'part', kind: 'agent', agent: 'worker' }],
    },
    { id: 'pick', kind: 'route', on: 'steps.plan.output.kind', cases: { x: 'sub' }, default: 'close' },
    { id: 'sub', kind: 'pipeline', pipeline: 'outline', when: 'steps.plan.output.kind == "x"' },
    { id: 'choose', kind: 'route', agent: 'router', targets: { check: 'review it', close: 'skip review' } },
    { id: 'check', kind: 'review', agent: 'reviewer', onReject: 'build', maxRounds: 2 },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ],
});

const choice = { target: 'check', reason: 'worth a look' };

export const everyKindScript: Script = {
  planner: () => text(JSON.stringify({ parts: ['a', 'b', 'c'], kind: 'x' })),
  // The first run of round 1 fails, so the step is retried (through its backoff state).
  builder: (request) =>
    request.stepId === 'task-1.build.1'
      ? {
          ok: false,
          error: { code: 'failed', message: 'broke once' },
          usage: usage(2),
          turns: 1,
          durationMs: 1,
        }
      : text(`built in round ${request.round}`, usage(20)),
  lefty: (request) => text(`left ${request.round}`),
  righty: (request) => text(`right ${request.round}`),
  worker: (request) => text(`part ${String(request.input?.item)}`, usage(3)),
  router: () => ({ ...text(JSON.stringify(choice)), structured: choice }),
  reviewer: (request) => (request.round === 1 ? verdict('reject', 'tighten it') : verdict('approve', 'good')),
  closer: (request) => text(request.context.map((c) => `${c.step}=${c.output}`).join(' | ')),
};

export const everyKindOptions: Pick<RunOptions, 'people' | 'pipelines'> = {
  people: (input): HumanRunOutput => ({
    ok: true,
    answer: `yes to ${input.stepId}`,
    by: 'ann',
    durationMs: 4,
  }),
  pipelines: (input): PipelineRunOutput => ({
    ok: true,
    output: `outline for ${input.task.id}`,
    usage: usage(7),
    durationMs: 3,
  }),
};
