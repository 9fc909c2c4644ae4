import type { ApprovalDecision, TroupeEvent } from '@troupe/protocol';
import { ControlReceipt, subjects } from '@troupe/protocol';
import {
  type AgentHost,
  createLogger,
  EventFactory,
  type HumanGate,
  JournalEntry,
  type Logger,
  type McpConnections,
  MemoryKv,
  StepJournal,
  startAgentHost,
  systemClock,
  ToolError,
  TransportError,
} from '@troupe/runtime';
import { pipelineTools } from '../agents/agentService.ts';
import { hostedAgents } from '../config/agentDefinitions.ts';
import { builtinTools } from '../config/builtinTools.ts';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { OnlineScoring } from '../evals/onlineScoring.ts';
import { MemoryTaskIntake } from '../intake/memoryTaskIntake.ts';
import { type PipelineRunner, startPipelineRunner } from '../workflow/pipelineRunner.ts';
import { HeldRecords } from './heldRecords.ts';
import { InProcessBus } from './inProcessBus.ts';

/** The events that end a task: one of them is the last an in-process run hears. */
export type FinalEvent = Extract<TroupeEvent, { kind: 'task.completed' | 'task.failed' | 'task.cancelled' }>;

/** What a stack is built for besides its pipeline: runs that differ in any of these get stacks of their own. */
export interface StackSettings {
  workspaceRoot: string;
  approvals: 'allow' | 'deny';
  /** Undefined: a silent logger. */
  logger: Logger | undefined;
}

/** One task for a stack to run. */
export interface StackTask {
  taskId: string;
  goal: string;
  input?: unknown;
  metadata?: Record<string, string>;
  onEvent?: (event: TroupeEvent) => void;
  signal?: AbortSignal;
  /** Scored online by the pipeline's `evals:` block, if its sample takes the task (default true). */
  onlineScoring?: boolean;
}

const FINAL_KINDS: ReadonlySet<string> = new Set(['task.completed', 'task.failed', 'task.cancelled']);

/**
 * How long a stack nobody uses is kept for the next run before it is stopped. Its timer does not keep the process
 * alive: a process whose work is done exits without waiting for it.
 */
const IDLE_STOP_MS = 1_000;

/**
 * How many task ids a stack remembers having run. A task id run again on the same stack would find its steps' replies
 * in its host's recent replies (the last 1,000 steps) and be answered from them instead of running: such a run gets a
 * stack of its own. 10,000 tasks hold well over 1,000 steps.
 */
const RECENT_TASK_IDS = 10_000;

/**
 * What an in-process run needs besides its task, built once per pipeline and settings and kept while runs come: an
 * in-memory bus, the pipeline's agent host and its runner (its flow compiled once), an in-memory intake, and task
 * records held in memory and forgotten as each task ends. It stores nothing (see {@link HeldRecords}): no journal, no
 * values, no outbox, only in-process listeners for events.
 */
export class InProcessStack {
  #stopped = false;
  /** The task ids this stack has run lately, oldest first. */
  readonly #taskIds = new Set<string>();
  /** The runs under way scored online (the pipeline has an `evals:` block and their `onlineScoring` is not false). */
  readonly #scored = new Set<string>();
  /** The version each run under way ended on, as the runner told its end (it is scored once the run has its events). */
  readonly #ended = new Map<string, string | undefined>();

  private constructor(
    readonly pipeline: string,
    private readonly bus: InProcessBus,
    private readonly host: AgentHost,
    private readonly runner: PipelineRunner,
    private readonly intake: MemoryTaskIntake,
    /** The task records of the runs under way; exposed for tests. */
    readonly records: HeldRecords,
    private readonly mcp: McpConnections[],
    private readonly logger: Logger,
    /** The pipeline's online scoring (its `evals:` block), told of each task's end by the runner, as a coordinator's. */
    private readonly scoring: OnlineScoring | undefined,
  ) {}

  static async start(loaded: LoadedPipeline, settings: StackSettings): Promise<InProcessStack> {
    const logger = settings.logger ?? createLogger({ level: 'silent' });
    const name = loaded.config.name;
    const clock = systemClock;
    const bus = new InProcessBus({ name: 'troupe-run', logger, clock });
    // Scored as a coordinator scores a live task, from the events the run collected, handed over by `run` (there is no
    // EVENTS stream here), its `eval.scored` told to the run's listener like its other events. Made once per stack: its
    // scorers with it.
    let stackOf: InProcessStack | undefined;
    const scoring = loaded.config.evals
      ? new OnlineScoring(loaded, { bus, events: new EventFactory(clock), clock, logger })
      : undefined;
    const mcp: McpConnections[] = [];
    const registry = await pipelineTools(loaded, builtinTools(), mcp, logger);
    const nobody = nobodyToAsk(settings.approvals);
    const host = startAgentHost({
      bus,
      pipeline: name,
      agents: hostedAgents(loaded),
      registry,
      workspaceRoot: settings.workspaceRoot,
      logger,
      clock,
      price: (provider, model, response) => loaded.prices.cost(provider, model, response.usage),
      human: nobody,
      version: loaded.version.hash,
      // Every step is handed to the host directly (no request on the bus): past a cap it would go over the bus to
      // this same host, so there is no cap.
      maxLocalSteps: Number.POSITIVE_INFINITY,
    });
    const intake = new MemoryTaskIntake();
    const records = new HeldRecords();
    try {
      const runner = await startPipelineRunner({
        bus,
        config: loaded.config,
        version: loaded.version.hash,
        store: records,
        intake,
        logger,
        clock,
        // The in-memory intake hands each run's task over at once: a run never waits for another's slot.
        concurrency: 1,
        // Records are held in memory, where a write costs nothing and nothing survives a crash: none is held back.
        checkpointLingerMs: 0,
        localSteps: host.local,
        // A `human` step asks the same nobody, and fails saying so; its journal lives as long as the stack.
        people: { gate: nobody, journal: new StepJournal(new MemoryKv(JournalEntry)), clock },
        ...(scoring
          ? {
              ended: (final: TroupeEvent, version?: string) => {
                if (stackOf === undefined || !stackOf.#scored.has(final.taskId)) return;
                stackOf.#ended.set(final.taskId, version);
              },
            }
          : {}),
      });
      stackOf = new InProcessStack(name, bus, host, runner, intake, records, mcp, logger, scoring);
      return stackOf;
    } catch (error) {
      await host.stop();
      await Promise.all(mcp.map((m) => m.close()));
      await bus.close();
      throw error;
    }
  }

  /**
   * Runs one task to its end, and resolves with its final event: once its online scoring is over too, when the
   * pipeline's `evals:` block samples it, so its `eval.scored` reaches `onEvent` before the run resolves.
   */
  async run(task: StackTask): Promise<FinalEvent> {
    const { bus, logger } = this;
    const { taskId } = task;
    // The first final event the task publishes.
    let final: FinalEvent | undefined;
    // The runner hears a cancel only once the task's actor listens for signals (after triage and the claim), and
    // answers none before: a cancel asked earlier (a signal aborted before or as the run began) is sent again with
    // each event of the task until one is answered. Those left unanswered are given up when the run is over.
    let cancel: 'no' | 'asked' | 'answered' = 'no';
    const over = new AbortController();
    const askCancel = () => {
      if (cancel === 'answered' || over.signal.aborted) return;
      cancel = 'asked';
      bus
        .request(subjects.control(taskId), { action: 'cancel' }, ControlReceipt, {
          timeoutMs: 10_000,
          signal: over.signal,
        })
        .then(
          () => {
            cancel = 'answered';
          },
          (error: unknown) => {
            if (TransportError.is(error, 'aborted') || TransportError.is(error, 'timeout')) return;
            // Refused (the task is ending already): nothing is left to cancel.
            cancel = 'answered';
            if (!TransportError.is(error, 'task_ended'))
              logger.warn({ err: error, taskId }, 'could not cancel the task');
          },
        );
    };
    const onAbort = () => askCancel();
    const scored = this.scoring !== undefined && task.onlineScoring !== false;
    const events: TroupeEvent[] | undefined = scored ? [] : undefined;
    if (events) this.#scored.add(taskId);
    const stopListening = bus.listen(taskId, (event) => {
      events?.push(event);
      if (cancel === 'asked') askCancel();
      // Before the caller's listener, which may throw (logged by the bus): the run still ends with its final event.
      if (final === undefined && FINAL_KINDS.has(event.kind)) final = event as FinalEvent;
      task.onEvent?.(event);
    });
    try {
      if (task.signal?.aborted) askCancel();
      task.signal?.addEventListener('abort', onAbort, { once: true });
      const delivery = this.intake.deliver(
        {
          id: taskId,
          goal: task.goal,
          ...(task.input === undefined ? {} : { input: task.input }),
          ...(task.metadata === undefined ? {} : { metadata: task.metadata }),
        },
        { storedAt: systemClock.now() },
      );
      await delivery.handled;
      // The final event is published before the task's message is settled; what it started is let finish.
      await bus.settled();
      if (!final) {
        const refusal = bus.refusal(taskId);
        throw new Error(
          refusal === undefined
            ? `task ${taskId} of pipeline ${this.pipeline} ended with no final event (it was refused)`
            : `task ${taskId} of pipeline ${this.pipeline} was refused: ${refusal}`,
        );
      }
      // Told of the task's end as its message was settled, and every event of the run heard (the final one with them):
      // scored from those, its score, if sampled, published before the run ends.
      if (this.scoring && events && this.#ended.has(taskId)) {
        this.scoring.ended(final, this.#ended.get(taskId), events);
        await this.scoring.scored(taskId);
        await bus.settled();
      }
      return final;
    } finally {
      task.signal?.removeEventListener('abort', onAbort);
      over.abort();
      stopListening();
      this.records.forget(taskId);
      this.#scored.delete(taskId);
      this.#ended.delete(taskId);
    }
  }

  /**
   * Takes a task id for a run on this stack: false when it ran here lately (see {@link RECENT_TASK_IDS}), and the run
   * must go to another stack.
   */
  takeTaskId(taskId: string): boolean {
    if (this.#taskIds.has(taskId)) return false;
    this.#taskIds.add(taskId);
    if (this.#taskIds.size > RECENT_TASK_IDS)
      this.#taskIds.delete(this.#taskIds.values().next().value as string);
    return true;
  }

  /** Whether {@link stop} was called. */
  get stopped(): boolean {
    return this.#stopped;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    try {
      await this.runner.stop();
    } finally {
      await this.scoring?.stop();
      await this.host.stop();
      await Promise.all(this.mcp.map((m) => m.close()));
      await this.bus.close();
    }
  }
}

/** A stack in use by runs; {@link StackLease.release} once the run is over. */
export interface StackLease {
  stack: InProcessStack;
  release(): void;
}

interface KeptStack {
  settings: StackSettings;
  stack: Promise<InProcessStack>;
  users: number;
  idle: ReturnType<typeof setTimeout> | undefined;
  /** Leases given so far. */
  leases: number;
  /** No longer given to new runs (see {@link LEASES_PER_STACK}): stopped as soon as its last run is over. */
  retired: boolean;
}

/**
 * Runs a stack is given before new runs get a new one: a bound on whatever a long-lived stack keeps of the tasks it
 * ran, and building one costs less than a run. What it was made for is fixed at its source (each task's end raced the
 * runner's `stopped` promise, 6b2f5ac; each step's actor id grew the XState memo of its group, 08facab): heap snapshots
 * of a stack never renewed, 400 and 1,300 runs in, differ by compiled code only. What it still bounds is the task ids
 * a stack remembers ({@link RECENT_TASK_IDS}).
 */
export const LEASES_PER_STACK = 1_000;

/** The stacks kept, by the loaded pipeline they run (a pipeline object no longer referenced lets its stacks go). */
const kept = new WeakMap<LoadedPipeline, KeptStack[]>();

/**
 * The stack for a pipeline and settings: the one kept from an earlier run, or a new one. A loop of runs of one
 * pipeline builds its agent host and runner, and compiles its flow, once; a stack is stopped once nobody has used it
 * for {@link IDLE_STOP_MS}. A run of a task id the kept stack has run lately gets a stack of its own, stopped as it is
 * released.
 */
export async function leaseStack(
  loaded: LoadedPipeline,
  settings: StackSettings,
  taskId?: string,
): Promise<StackLease> {
  const shared = await sharedStack(loaded, settings);
  if (taskId === undefined || shared.stack.takeTaskId(taskId)) return shared;
  shared.release();
  const own = await InProcessStack.start(loaded, settings);
  own.takeTaskId(taskId);
  return { stack: own, release: () => void own.stop().catch(() => {}) };
}

async function sharedStack(loaded: LoadedPipeline, settings: StackSettings): Promise<StackLease> {
  const list = kept.get(loaded) ?? [];
  kept.set(loaded, list);
  let entry = list.find(
    (k) =>
      k.settings.workspaceRoot === settings.workspaceRoot &&
      k.settings.approvals === settings.approvals &&
      k.settings.logger === settings.logger,
  );
  if (!entry) {
    const added: KeptStack = {
      settings,
      stack: InProcessStack.start(loaded, settings),
      users: 0,
      idle: undefined,
      leases: 0,
      retired: false,
    };
    list.push(added);
    // A stack that could not start is not kept: the next run tries again.
    added.stack.catch(() => drop(list, added));
    entry = added;
  }
  const taken = entry;
  taken.users += 1;
  taken.leases += 1;
  if (taken.leases >= LEASES_PER_STACK) {
    taken.retired = true;
    drop(list, taken);
  }
  clearTimeout(taken.idle);
  taken.idle = undefined;
  try {
    const stack = await taken.stack;
    let released = false;
    return {
      stack,
      release: () => {
        if (released) return;
        released = true;
        unuse(list, taken);
      },
    };
  } catch (error) {
    taken.users -= 1;
    throw error;
  }
}

function unuse(list: KeptStack[], entry: KeptStack): void {
  entry.users -= 1;
  if (entry.users > 0) return;
  const stop = () => {
    drop(list, entry);
    void entry.stack.then((stack) => stack.stop()).catch(() => {});
  };
  if (entry.retired) {
    stop();
    return;
  }
  entry.idle = setTimeout(stop, IDLE_STOP_MS);
  entry.idle.unref();
}

function drop(list: KeptStack[], entry: KeptStack): void {
  const at = list.indexOf(entry);
  if (at >= 0) list.splice(at, 1);
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
