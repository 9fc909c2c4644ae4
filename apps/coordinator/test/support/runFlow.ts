import type { AgentStepRequest, UsageTotals, Verdict } from '@troupe/protocol';
import type { Clock } from '@troupe/runtime';
import { createActor, fromPromise, type Snapshot, toPromise } from 'xstate';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { compileFlow } from '../../src/workflow/compileFlow.ts';
import { hearEndedItems } from '../../src/workflow/steps/foreachItem.ts';
import type {
  HumanRunInput,
  HumanRunOutput,
  PipelineRunInput,
  PipelineRunOutput,
  StepRunInput,
  StepRunOutput,
  WorkflowEmitted,
  WorkflowEvent,
  WorkflowInput,
  WorkflowOutput,
} from '../../src/workflow/workflowTypes.ts';

export const task: WorkflowInput = {
  taskId: 'task-1',
  pipeline: 'demo',
  goal: 'Write a short note.',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};

export const usage = (inputTokens: number, outputTokens = 1): UsageTotals => ({
  inputTokens,
  outputTokens,
  cachedTokens: 0,
  costUsd: 0,
  modelCalls: 1,
});

/** A reply without its step id, which the fake runStep copies from the request. */
type WithoutStepId<T> = T extends unknown ? Omit<T, 'stepId'> : never;
export type Reply = WithoutStepId<StepRunOutput>;

export const text = (output: string, spent = usage(10)): Reply => ({
  ok: true,
  output,
  usage: spent,
  turns: 1,
  durationMs: 5,
});
export const verdict = (decision: Verdict['decision'], feedback: string, spent = usage(1)): Reply => ({
  ok: true,
  output: JSON.stringify({ decision, feedback }),
  verdict: { decision, feedback },
  usage: spent,
  turns: 1,
  durationMs: 5,
});

/** A failed reply, as an agent's step gives one. */
export const failedReply = (message: string): Reply => ({
  ok: false,
  error: { code: 'failed', message },
  usage: usage(1),
  turns: 1,
  durationMs: 1,
});

/** The events of one kind among those a run emitted. */
export const ofKind = (events: WorkflowEmitted[], kind: string) => events.filter((e) => e.kind === kind);

/** A pipeline of these steps on the scripted model, with these agents (each instructed with its own name). */
export function pipelineOf(
  agents: readonly string[],
  steps: unknown[],
  extra: Record<string, unknown> = {},
): PipelineConfig {
  return PipelineConfig.parse({
    version: 1,
    name: 'demo',
    models: { scripted: { provider: 'scripted', script: './demo.script.yaml' } },
    defaults: { model: 'scripted' },
    agents: Object.fromEntries(agents.map((a) => [a, { instructions: a }])),
    flow: steps,
    ...extra,
  });
}

/** A reply function per agent, given the agent's request and how many times that agent was called before. */
export type Script = Record<
  string,
  (request: AgentStepRequest, call: number, signal: AbortSignal) => Reply | Promise<Reply>
>;

export interface RunOptions {
  /** Resume from this persisted snapshot instead of starting the task afresh. */
  snapshot?: unknown;
  /** The task; {@link task} by default. */
  input?: WorkflowInput;
  /** Called on each snapshot of the run, with the persisted snapshot (a checkpoint). */
  onCheckpoint?: (snapshot: unknown) => void;
  /** Runs the `pipeline` steps' sub-tasks. */
  pipelines?: (
    input: PipelineRunInput,
    signal: AbortSignal,
  ) => PipelineRunOutput | Promise<PipelineRunOutput>;
  /** Answers the `human` steps' questions. */
  people?: (input: HumanRunInput, signal: AbortSignal) => HumanRunOutput | Promise<HumanRunOutput>;
  /** The workflow's clock (its retry backoff runs on it); the real one by default. */
  clock?: Clock;
  /** Called with the workflow actor once it has started, to send it events (a cancel) while it runs. */
  onStart?: (actor: { send(event: WorkflowEvent): void }) => void;
}

/** Runs the compiled flow to its end with a fake `runStep`, recording every request and emitted event. */
export async function run(config: PipelineConfig, script: Script, options: RunOptions = {}) {
  const requests: StepRunInput[] = [];
  const asked: HumanRunInput[] = [];
  const submitted: PipelineRunInput[] = [];
  const events: WorkflowEmitted[] = [];
  const machine = compileFlow(config, {
    runStep: fromPromise<StepRunOutput, StepRunInput>(async ({ input, signal }) => {
      const { request } = input;
      const call = requests.filter((r) => r.request.agent === request.agent).length;
      requests.push(input);
      const reply = script[request.agent];
      if (!reply) throw new Error(`no reply scripted for agent ${request.agent}`);
      return { ...(await reply(request, call, signal)), stepId: request.stepId } as StepRunOutput;
    }),
    runPipeline: fromPromise<PipelineRunOutput, PipelineRunInput>(async ({ input, signal }) => {
      submitted.push(input);
      if (!options.pipelines) throw new Error(`nothing runs pipeline ${input.pipeline}`);
      return options.pipelines(input, signal);
    }),
    askPerson: fromPromise<HumanRunOutput, HumanRunInput>(async ({ input, signal }) => {
      asked.push(input);
      if (!options.people) throw new Error(`nobody answers step ${input.step}`);
      return options.people(input, signal);
    }),
  });
  const actor = createActor(machine, {
    input: options.input ?? task,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.snapshot === undefined ? {} : { snapshot: options.snapshot as Snapshot<unknown> }),
  });
  actor.on('event', (event) => events.push(event));
  if (options.onCheckpoint) {
    const checkpoint = options.onCheckpoint;
    actor.subscribe({ next: () => checkpoint(actor.getPersistedSnapshot()), error: () => {} });
  }
  actor.start();
  hearEndedItems(actor);
  options.onStart?.(actor);
  const output: WorkflowOutput = await toPromise(actor);
  const calls = (agent: string) => requests.filter((r) => r.request.agent === agent).map((r) => r.request);
  return { output, requests, asked, submitted, events, calls, actor, machine };
}
