import { randomBytes } from 'node:crypto';
import type { ApprovalDecision, TroupeEvent } from '@troupe/protocol';
import { ControlReceipt, subjects, TroupeEvent as TroupeEventSchema, WorkflowRecord } from '@troupe/protocol';
import {
  createLogger,
  type HumanGate,
  JournalEntry,
  type Logger,
  MemoryBus,
  MemoryKv,
  StepJournal,
  startAgentHost,
  systemClock,
  ToolError,
} from '@troupe/runtime';
import { pipelineTools } from './agents/agentService.ts';
import { hostedAgents } from './config/agentDefinitions.ts';
import { builtinTools } from './config/builtinTools.ts';
import { type LoadedPipeline, type LoadOptions, loadPipeline } from './config/loadPipeline.ts';
import { MemoryTaskIntake } from './intake/memoryTaskIntake.ts';
import { startPipelineRunner } from './workflow/pipelineRunner.ts';

/** The events that end a task: one of them is the last `runTask` hears. */
type FinalEvent = Extract<TroupeEvent, { kind: 'task.completed' | 'task.failed' | 'task.cancelled' }>;

export interface RunTaskOptions {
  /** The pipeline, loaded, or the path of its file (loaded as `loadPipeline` does with the built-in tools). */
  pipeline: LoadedPipeline | string;
  goal: string;
  input?: unknown;
  /** The task's id; a fresh `t-…` one when absent. */
  taskId?: string;
  /** Each event of the task, in order, as `troupe tail` would show them. */
  onEvent?: (event: TroupeEvent) => void;
  /** Cancels the task (`troupe cancel`'s path: the task ends `task.cancelled`). */
  signal?: AbortSignal;
  /** Where the task's workspace is made (`<workspaceRoot>/<pipeline>/<taskId>`). */
  workspaceRoot: string;
  /**
   * What an `ask` permission rule gets with no person to ask: `allow` approves every such call, `deny` (default)
   * refuses it saying why. A question (`ask_human`) fails either way.
   */
  approvals?: 'allow' | 'deny';
  logger?: Logger;
}

export interface RunTaskResult {
  /** `task.completed`, `task.failed` or `task.cancelled`. */
  final: FinalEvent;
}

const FINAL_KINDS: ReadonlySet<string> = new Set(['task.completed', 'task.failed', 'task.cancelled']);

/**
 * Runs one task of a pipeline in this process, with no server: an in-memory bus carries its step requests and
 * events, its checkpoints go to an in-memory bucket, and it has no step journal and no stored values. The same
 * pipeline file gives the same events and result as under `troupe up`, but **nothing is durable**: a crash of this
 * process loses the task, and nothing of it can be read afterwards but its workspace. For tests, evals and scripts
 * (`troupe run`). The client API does not offer it, since `@troupe/client` never depends on the coordinator.
 */
export async function runTask(options: RunTaskOptions): Promise<RunTaskResult> {
  const logger = options.logger ?? createLogger({ level: 'silent' });
  const loaded =
    typeof options.pipeline === 'string'
      ? await loadPipeline(options.pipeline, loadOptions())
      : options.pipeline;
  const name = loaded.config.name;
  const taskId = options.taskId ?? `t-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const clock = systemClock;
  const bus = new MemoryBus({ name: 'troupe-run', logger, clock });
  const registry = await pipelineTools(loaded, builtinTools(), [], logger);
  const nobody = nobodyToAsk(options.approvals ?? 'deny');
  const host = startAgentHost({
    bus,
    pipeline: name,
    agents: hostedAgents(loaded),
    registry,
    workspaceRoot: options.workspaceRoot,
    logger,
    clock,
    price: (provider, model, response) => loaded.prices.cost(provider, model, response.usage),
    human: nobody,
    version: loaded.version.hash,
  });
  const intake = new MemoryTaskIntake();
  // The first final event the task publishes.
  let final: FinalEvent | undefined;
  const events = bus.subscribe(subjects.taskEvents(taskId, name), TroupeEventSchema, ({ value }) => {
    options.onEvent?.(value);
    if (final === undefined && FINAL_KINDS.has(value.kind)) final = value as FinalEvent;
  });
  try {
    const runner = await startPipelineRunner({
      bus,
      config: loaded.config,
      version: loaded.version.hash,
      store: new MemoryKv(WorkflowRecord),
      intake,
      logger,
      clock,
      concurrency: 1,
      // A `human` step asks the same nobody, and fails saying so; its journal lives as long as the run.
      people: { gate: nobody, journal: new StepJournal(new MemoryKv(JournalEntry)), clock },
    });
    try {
      const cancel = () =>
        void bus
          .request(subjects.control(taskId), { action: 'cancel' }, ControlReceipt, { timeoutMs: 10_000 })
          .catch((error) => logger.warn({ err: error, taskId }, 'could not cancel the task'));
      if (options.signal?.aborted) cancel();
      options.signal?.addEventListener('abort', cancel, { once: true });
      const delivery = intake.deliver(
        { id: taskId, goal: options.goal, ...(options.input === undefined ? {} : { input: options.input }) },
        { storedAt: clock.now() },
      );
      try {
        await delivery.handled;
        // The final event is published before the task's message is settled; what it started is let finish.
        await bus.settled();
        if (!final)
          throw new Error(`task ${taskId} of pipeline ${name} ended with no final event (it was refused)`);
        return { final };
      } finally {
        options.signal?.removeEventListener('abort', cancel);
      }
    } finally {
      await runner.stop();
    }
  } finally {
    events.unsubscribe();
    await host.stop();
    await bus.close();
  }
}

/** How `runTask` loads a pipeline given by path: as `troupe up` does, with the built-in tools. */
function loadOptions(): LoadOptions {
  return { toolNames: builtinTools().names() };
}

/**
 * The person an in-process run does not have: an `ask` call is approved or denied as told, saying who decided, and a
 * question fails, naming why, so the model reads it rather than waiting for ever.
 */
function nobodyToAsk(approvals: 'allow' | 'deny'): HumanGate {
  return {
    approve: async (): Promise<ApprovalDecision> =>
      approvals === 'allow'
        ? { decision: 'allow', by: 'troupe run --yes' }
        : {
            decision: 'deny',
            reason: 'troupe run has no person to approve calls; run it with --yes to allow calls that ask',
            by: 'troupe run',
          },
    ask: async () => {
      throw new ToolError(
        'denied',
        'troupe run has no person to answer questions; run the pipeline under troupe up, where troupe answer or the gateway answers them',
      );
    },
  };
}
