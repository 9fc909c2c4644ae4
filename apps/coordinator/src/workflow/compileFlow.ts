import type {
  AgentStepRequest,
  StepBudget,
  StepOutput,
  TaskFailureReason,
  UsageTotals,
} from '@troupe/protocol';
import { emptyUsage, errorMessage, StepErrorCode, sumUsage, taskFailureReason } from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import { assign, emit, fromPromise, setup } from 'xstate';
import type { PipelineConfig, ReviewStepConfig, StepConfig } from '../config/pipelineSchema.ts';
import type {
  StepRunInput,
  StepRunOutput,
  WorkflowContext,
  WorkflowEmitted,
  WorkflowEvent,
  WorkflowFailure,
  WorkflowInput,
  WorkflowOutput,
} from './workflowTypes.ts';

export { FINAL_STATES } from './workflowTypes.ts';

const workflowSetup = setup({
  types: {
    context: {} as WorkflowContext,
    input: {} as WorkflowInput,
    output: {} as WorkflowOutput,
    emitted: {} as WorkflowEmitted,
    events: {} as WorkflowEvent,
  },
  actors: {
    runStep: fromPromise<StepRunOutput, StepRunInput>(async () => {
      throw new Error('runStep is not provided');
    }),
  },
  actions: {
    recordOutput: assign(({ context }, p: { step: StepConfig; reply: StepRunOutput }) => {
      if (!p.reply.ok) return {};
      const output: StepOutput = {
        step: p.step.id,
        agent: p.step.agent,
        round: context.round,
        output: p.reply.output,
      };
      return {
        latest: { ...context.latest, [p.step.id]: output },
        lastAgent: p.step.agent,
        ...(context.reworkTarget === p.step.id ? { reworkTarget: undefined } : {}),
      };
    }),
    /** What a step spent counts towards the task whether the step succeeded or not. */
    recordUsage: assign(({ context }, p: { step: StepConfig; reply: StepRunOutput }) => ({
      usage: sumUsage(context.usage, p.reply.usage),
      usageByAgent: {
        ...context.usageByAgent,
        [p.step.agent]: sumUsage(context.usageByAgent[p.step.agent] ?? emptyUsage(), p.reply.usage),
      },
    })),
    recordApproval: assign({ approved: true, feedback: undefined }),
    recordRejection: assign(({ context }, p: { step: ReviewStepConfig; feedback: string }) => ({
      approved: false,
      feedback: p.feedback,
      reworkTarget: p.step.onReject,
      round: context.round + 1,
      rejections: { ...context.rejections, [p.step.id]: (context.rejections[p.step.id] ?? 0) + 1 },
    })),
    fail: assign((_, failure: WorkflowFailure) => ({ failure })),
  },
});

/**
 * Compiles a pipeline's `flow` into a workflow state machine: one state per step, each invoking `runStep`
 * (injected with `.provide()`), and the final states `completed`, `failed`, `cancelled` and `released`. A review step's
 * verdict picks the next state: approve moves on; reject goes back to `onReject` with the feedback, at most
 * `maxRounds` rounds, then fails (or completes unapproved, as `onMaxRounds` says). A `cancel` event, in any step,
 * ends the workflow `cancelled`; a `release` event ends this run of it `released`, leaving the task to resume
 * elsewhere (leaving the step stops its call to the agent, either way).
 */
export function compileFlow(config: PipelineConfig) {
  const stepTimeoutMs = (step: StepConfig) => (step.timeout ?? config.defaults.stepTimeout) * 1_000;
  const states: Record<string, object> = {};
  config.flow.forEach((step, index) => {
    const next = config.flow[index + 1]?.id ?? 'completed';
    states[step.id] = {
      entry: [
        emit(({ context }: { context: WorkflowContext }) => handoff(context, step)),
        emit(({ context }: { context: WorkflowContext }) => ({
          type: 'event' as const,
          kind: 'step.started' as const,
          from: 'workflow',
          to: step.agent,
          data: { step: step.id, agent: step.agent, round: context.round, stepId: stepId(context, step) },
        })),
      ],
      invoke: {
        src: 'runStep',
        input: ({ context }: { context: WorkflowContext }): StepRunInput => ({
          request: buildRequest(config, context, step, index),
          timeoutMs: stepTimeoutMs(step),
        }),
        onDone: [
          ...stepCompleted(step),
          ...(step.kind === 'review'
            ? reviewTransitions(step, next)
            : [{ target: next, actions: record(step) }]),
        ],
        onError: {
          target: 'failed',
          actions: {
            type: 'fail',
            params: ({ event }: { event: { error: unknown } }) => ({
              reason: callFailureReason(event.error),
              message: `step ${step.id} (${step.agent}) could not be run: ${errorMessage(event.error)}`,
              step: step.id,
            }),
          },
        },
      },
    };
  });
  states.completed = { type: 'final' };
  states.failed = { type: 'final' };
  states.cancelled = { type: 'final' };
  states.released = { type: 'final' };

  return workflowSetup.createMachine({
    id: `workflow:${config.name}`,
    context: ({ input }) => ({
      task: input,
      round: 1,
      rejections: {},
      latest: {},
      usage: emptyUsage(),
      usageByAgent: {},
    }),
    initial: config.flow[0]?.id ?? 'completed',
    on: {
      cancel: {
        target: '.cancelled',
        actions: assign(({ event }) => ({
          cancelled: event.reason === undefined ? {} : { reason: event.reason },
        })),
      },
      release: {
        target: '.released',
        actions: assign(({ event }) => ({ released: { why: event.why } })),
      },
    },
    // The states are built from config, so their shape is checked by the tests, not the compiler.
    states: states as never,
    output: ({ context }) => workflowOutput(config, context),
  });
}

export type WorkflowMachine = ReturnType<typeof compileFlow>;

type Done = { event: { output: StepRunOutput } };

/** Every step ends with `step.completed`; a failed reply ends the task. */
function stepCompleted(step: StepConfig) {
  return [
    {
      guard: ({ event }: Done) => !event.output.ok,
      target: 'failed',
      actions: [
        completedEvent(step),
        { type: 'recordUsage', params: ({ event }: Done) => ({ step, reply: event.output }) },
        {
          type: 'fail',
          params: ({ event }: Done) => ({
            reason: event.output.ok ? 'step_failed' : taskFailureReason(event.output.error.code),
            message: event.output.ok
              ? ''
              : `step ${step.id} (${step.agent}) failed: ${event.output.error.message}`,
            step: step.id,
          }),
        },
      ],
    },
  ];
}

function record(step: StepConfig) {
  return [
    completedEvent(step),
    { type: 'recordUsage', params: ({ event }: Done) => ({ step, reply: event.output }) },
    { type: 'recordOutput', params: ({ event }: Done) => ({ step, reply: event.output }) },
  ];
}

function reviewTransitions(step: ReviewStepConfig, next: string) {
  const verdictOf = (event: Done['event']) => (event.output.ok ? event.output.verdict : undefined);
  const atBound = ({ context }: { context: WorkflowContext }) =>
    (context.rejections[step.id] ?? 0) + 1 >= step.maxRounds;
  return [
    {
      guard: ({ event }: Done) => verdictOf(event) === undefined,
      target: 'failed',
      actions: [
        ...record(step),
        {
          type: 'fail',
          params: () => ({
            reason: 'invalid_output',
            message: `review ${step.id} returned no verdict`,
            step: step.id,
          }),
        },
      ],
    },
    {
      guard: ({ event }: Done) => verdictOf(event)?.decision === 'approve',
      target: next,
      actions: [...record(step), 'recordApproval'],
    },
    {
      guard: (args: Done & { context: WorkflowContext }) => !atBound(args),
      target: step.onReject,
      actions: [
        ...record(step),
        {
          type: 'recordRejection',
          params: ({ event }: Done) => ({ step, feedback: verdictOf(event)?.feedback ?? '' }),
        },
      ],
    },
    step.onMaxRounds === 'complete'
      ? { target: 'completed', actions: [...record(step), assign({ approved: false })] }
      : {
          target: 'failed',
          actions: [
            ...record(step),
            assign({ approved: false }),
            {
              type: 'fail',
              params: ({ event }: Done) => ({
                reason: 'max_rounds',
                message: `review ${step.id} rejected the work in all ${step.maxRounds} rounds; last feedback: ${verdictOf(event)?.feedback ?? ''}`,
                step: step.id,
              }),
            },
          ],
        },
  ];
}

function completedEvent(step: StepConfig) {
  return emit(({ context, event }: { context: WorkflowContext; event: unknown }) => {
    const reply = (event as Done['event']).output;
    return {
      type: 'event' as const,
      kind: 'step.completed' as const,
      from: step.agent,
      to: 'workflow',
      data: {
        step: step.id,
        agent: step.agent,
        round: context.round,
        stepId: stepId(context, step),
        ok: reply.ok,
        output: reply.ok ? preview(reply.output, 256 * 1024) : '',
        ...(reply.ok && reply.verdict ? { verdict: reply.verdict } : {}),
        ...(reply.ok ? {} : { error: reply.error }),
        usage: reply.usage,
        turns: reply.turns,
        durationMs: reply.durationMs,
      },
    };
  });
}

function handoff(context: WorkflowContext, step: StepConfig): WorkflowEmitted {
  const from = context.lastAgent ?? 'task';
  const reason = context.reworkTarget === step.id ? 'rework' : 'next';
  return {
    type: 'event',
    kind: 'agent.handoff',
    from,
    to: step.agent,
    data: { step: step.id, round: context.round, reason },
  };
}

export const stepId = (context: WorkflowContext, step: StepConfig): string =>
  `${context.task.taskId}.${step.id}.${context.round}`;

/** The request for a step: the task, the outputs it may see, and the reviewer's feedback when reworking. */
function buildRequest(
  config: PipelineConfig,
  context: WorkflowContext,
  step: StepConfig,
  index: number,
): AgentStepRequest {
  const visible = step.context ?? config.flow.slice(0, index).map((s) => s.id);
  const own = context.latest[step.id];
  const outputs = [...visible.map((id) => context.latest[id]), ...(own ? [own] : [])].filter(
    (o): o is StepOutput => o !== undefined,
  );
  const reworking = context.approved === false && context.feedback !== undefined;
  return {
    stepId: stepId(context, step),
    taskId: context.task.taskId,
    pipeline: context.task.pipeline,
    agent: step.agent,
    step: step.id,
    round: context.round,
    goal: context.task.goal,
    ...(context.task.input ? { input: context.task.input } : {}),
    context: outputs,
    ...(reworking && step.kind === 'agent' ? { feedback: context.feedback } : {}),
    expect: step.kind === 'review' ? 'verdict' : 'text',
    ...budgetFor(config, context, step.agent),
    priorModelCalls: context.usageByAgent[step.agent]?.modelCalls ?? 0,
    ...(context.lastAgent ? { from: context.lastAgent } : {}),
    traceparent: context.task.traceparent,
  };
}

function workflowOutput(config: PipelineConfig, context: WorkflowContext): WorkflowOutput {
  const lastWork = [...config.flow].reverse().find((s) => s.kind === 'agent' && context.latest[s.id]);
  return {
    status: context.released
      ? 'released'
      : context.cancelled
        ? 'cancelled'
        : context.failure
          ? 'failed'
          : 'completed',
    output: lastWork ? (context.latest[lastWork.id]?.output ?? '') : '',
    approved: context.approved,
    rounds: context.round,
    usage: context.usage,
    usageByAgent: context.usageByAgent,
    ...(context.failure ? { failure: context.failure } : {}),
    ...(context.cancelled?.reason === undefined ? {} : { cancelReason: context.cancelled.reason }),
    ...(context.released ? { released: context.released.why } : {}),
  };
}

/** The task's failure reason for a step that could not be run, from the code of the error its call threw. */
function callFailureReason(error: unknown): TaskFailureReason {
  const code = StepErrorCode.safeParse((error as { code?: unknown } | undefined)?.code);
  return taskFailureReason(code.data, 'call');
}

/** What the step may still spend: the tighter of the task's remaining budget and the agent's. */
function budgetFor(config: PipelineConfig, context: WorkflowContext, agent: string): { budget?: StepBudget } {
  const task = config.budget;
  const own = config.agents[agent]?.budget;
  const spentByAgent = context.usageByAgent[agent] ?? emptyUsage();
  const budget: StepBudget = { sources: {} };
  const limit = (
    key: 'tokens' | 'costUsd' | 'modelCalls',
    candidates: [number | undefined, number, string][],
  ) => {
    for (const [max, spent, source] of candidates) {
      if (max === undefined) continue;
      const left = Math.max(0, max - spent);
      const current = budget[key];
      if (current === undefined || left < current) {
        budget[key] = left;
        budget.sources[key] = source;
      }
    }
  };
  const tokens = (u: UsageTotals) => u.inputTokens + u.outputTokens;
  limit('tokens', [
    [task?.maxTokens, tokens(context.usage), `the task budget of ${task?.maxTokens} tokens`],
    [own?.maxTokens, tokens(spentByAgent), `agent ${agent}'s budget of ${own?.maxTokens} tokens`],
  ]);
  limit('costUsd', [
    [task?.maxCostUsd, context.usage.costUsd, `the task budget of $${task?.maxCostUsd}`],
    [own?.maxCostUsd, spentByAgent.costUsd, `agent ${agent}'s budget of $${own?.maxCostUsd}`],
  ]);
  limit('modelCalls', [
    [task?.maxModelCalls, context.usage.modelCalls, `the task budget of ${task?.maxModelCalls} model calls`],
    [
      own?.maxModelCalls,
      spentByAgent.modelCalls,
      `agent ${agent}'s budget of ${own?.maxModelCalls} model calls`,
    ],
  ]);
  if (context.task.deadline !== undefined) {
    budget.deadline = context.task.deadline;
    budget.sources.deadline = `the task's wall-clock budget of ${task?.timeout} s`;
  }
  return Object.keys(budget.sources).length > 0 ? { budget } : {};
}
