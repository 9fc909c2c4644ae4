import { randomUUID } from 'node:crypto';
import type { WorkflowRecord } from '@troupe/protocol';
import {
  ControlMessage,
  type ControlReceipt,
  type ControlRefusal,
  checkTaskInput,
  type ErrorReply,
  emptyUsage,
  errorMessage,
  FINAL_EVENT_KINDS,
  type InputCut,
  isTaskId,
  parseEvent,
  parseMessage,
  subjects,
  type TaskEnding,
  TaskSubmission,
  type TroupeEvent,
} from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  EventFactory,
  type EventScope,
  endingOf,
  every,
  type KvEntry,
  type Logger,
  logMessage,
  newTraceparent,
  sleep,
  throughOutages,
  type ValueStore,
} from '@troupe/runtime';
import { createActor, fromPromise, toPromise } from 'xstate';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { versionHash } from '../config/pipelineVersion.ts';
import { DEFAULT_INTAKE_LIMITS, type IntakeLimits, LIMIT_FLAGS } from '../intake/intakeLimits.ts';
import { readStoredInput } from '../intake/storedInput.ts';
import type { TaskDelivery, TaskIntake, TaskQueue } from '../intake/taskQueue.ts';
import { compileFlow } from './compileFlow.ts';
import { type FlowVersion, FlowVersions } from './flowVersions.ts';
import { createHumanStepRunner, type HumanStepDeps } from './humanStep.ts';
import { createStepRunner } from './stepRunner.ts';
import { TaskEvents } from './taskEvents.ts';
import { type Stage, taskLifecycleMachine } from './taskLifecycle.ts';
import { TaskMigrations } from './taskMigrations.ts';
import { type Lease, type Run, type RunningTask, runWorkflow, type WorkflowStore } from './workflowRun.ts';
import type {
  HumanRunInput,
  HumanRunOutput,
  PipelineRunInput,
  PipelineRunOutput,
  StepRunInput,
  StepRunOutput,
  WorkflowInput,
} from './workflowTypes.ts';

export interface PipelineRunnerOptions {
  bus: Bus;
  /** The pipeline as this coordinator loaded it: what new tasks run on. */
  config: PipelineConfig;
  /**
   * The content hash of `config` and its files (see `pipelineVersion.ts`), recorded on each task it starts; the
   * hash of `config` alone when absent.
   */
  version?: string;
  /**
   * The config of another stored version of the pipeline, for a task that started on it (undefined when none is
   * stored); without it, such a task runs on `config`.
   */
  loadVersion?: (hash: string) => Promise<PipelineConfig | undefined>;
  /**
   * The newest version of the pipeline (the one the last coordinator to start with it loaded, as the registry says):
   * what a new task starts on, loaded with `loadVersion`, so coordinators of two versions side by side in a rolling
   * restart start every new task on the same one. Without it, or when that version cannot be loaded, `version`.
   */
  newest?: () => Promise<string | undefined>;
  /** The hashes of every stored version of the pipeline, to find the one a migration names by a prefix. */
  versionHashes?: () => Promise<string[]>;
  store: WorkflowStore;
  /** Where the tasks come from and the given-up ones go (`natsTaskIntake(bus)` in production). */
  intake: TaskIntake;
  logger: Logger;
  clock: Clock;
  /** The most tasks of this pipeline this process works on at once; tasks parked on a person or a model do not count. */
  concurrency: number;
  /** The most tasks of this pipeline this process holds at once, parked or working (default 1,000). */
  maxInFlight?: number;
  ackWaitMs?: number;
  /**
   * Deliveries in a row that made no progress (wrote no new checkpoint) before a task is given up on and
   * dead-lettered (default 10). A hand-back at shutdown is not counted.
   */
  maxDeliver?: number;
  noResponderWaitMs?: number;
  /** How often agent hosts report on a step (see `createStepRunner`). */
  stepHeartbeatMs?: number;
  /** How large and deep a task payload may be. */
  limits?: IntakeLimits;
  /** Where inputs too large for a task message are read from (the pipeline's inputs bucket); without it, a task with one is refused. */
  values?: Pick<ValueStore, 'read'>;
  /** Runs `pipeline` steps' sub-tasks; without it, a `pipeline` step fails the task saying so. */
  subPipelines?: (
    input: PipelineRunInput,
    signal: AbortSignal,
    stopping: () => boolean,
  ) => Promise<PipelineRunOutput>;
  /** What `human` steps ask people with; without it, a `human` step fails the task saying so. */
  people?: Omit<HumanStepDeps, 'onActivity'>;
  /** Closes a task's pending approvals and questions once it has ended; returns how many it closed. */
  closeRequests?: (taskId: string, ending: TaskEnding) => Promise<number>;
}

/** Runs one pipeline's tasks: one workflow actor per task, events on the wire, snapshots in KV. */
export interface PipelineRunner {
  readonly pipeline: string;
  /** Task ids running in this process now. */
  running(): string[];
  /** Reads and compiles a stored version ahead of its tasks; says why when it cannot be run. */
  prepare(hash: string): Promise<string | undefined>;
  /**
   * Makes a prepared version what new tasks start on when the registry cannot be read: a reload here made it the
   * newest, as a restart with its file would make it this coordinator's own.
   */
  adopt(hash: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

/** How long a task's end waits for its final event to be stored before it says it is still waiting. */
const FINAL_EVENT_WAIT_MS = 10_000;
/**
 * Events waiting to be stored by `EVENTS` (this process's, every pipeline's) above which no new task is pulled:
 * the tasks in flight produce events faster than they go out, and more tasks would only lengthen the queue (whose
 * bound, 10,000, drops the oldest events).
 */
const EVENT_BACKLOG_HOLD = 2_000;

export async function startPipelineRunner(options: PipelineRunnerOptions): Promise<PipelineRunner> {
  const { bus, config, store, logger, clock } = options;
  const pipeline = config.name;
  const limits = options.limits ?? DEFAULT_INTAKE_LIMITS;
  const events = new EventFactory(clock);
  const taskEvents = new TaskEvents(events, pipeline);
  const runStep = createStepRunner({
    bus,
    clock,
    logger,
    ...(options.noResponderWaitMs === undefined ? {} : { noResponderWaitMs: options.noResponderWaitMs }),
    ...(options.stepHeartbeatMs === undefined ? {} : { heartbeatMs: options.stepHeartbeatMs }),
    onActivity: (taskId, activity) => running.get(taskId)?.noteActivity(activity),
  });
  const stepActors = {
    runStep: fromPromise<StepRunOutput, StepRunInput>(({ input, signal }) =>
      runStep(stepOfRun(input, running.get(input.request.taskId)), signal),
    ),
    askPerson: fromPromise<HumanRunOutput, HumanRunInput>(({ input, signal }) =>
      migrations.asking(input.taskId, input.stepId, () => askPerson(input, signal)),
    ),
    runPipeline: fromPromise<PipelineRunOutput, PipelineRunInput>(({ input, signal }) => {
      if (!options.subPipelines)
        throw new Error('this coordinator cannot run sub-pipelines (no `subPipelines` option)');
      // A step left because this coordinator stops leaves its sub-task running, for the run that resumes it.
      return options.subPipelines(
        input,
        signal,
        () => stopping || migrations.moving(input.task.parent.taskId),
      );
    }),
  };
  /** The pipeline's versions this runner runs tasks on: its own, and the others its tasks started on. */
  const versions = new FlowVersions({
    pipeline,
    config,
    hash: options.version ?? versionHash(config, {}),
    compile: (versionConfig) => compileFlow(versionConfig, stepActors),
    source: {
      ...(options.loadVersion ? { load: options.loadVersion } : {}),
      ...(options.newest ? { newest: options.newest } : {}),
      ...(options.versionHashes ? { hashes: options.versionHashes } : {}),
    },
    logger,
  });
  const current = versions.current;
  const people = options.people;
  const migrations = new TaskMigrations({
    pipeline,
    versions,
    ...(people?.gate.leavePending ? { leavePending: (stepId) => people.gate.leavePending?.(stepId) } : {}),
    clock,
    logger,
  });
  /** The parent of each task here that a `pipeline` step submitted: when the parent ends, so does the child. */
  const parents = new Map<string, string>();
  const askPerson = people
    ? createHumanStepRunner({
        ...people,
        onActivity: (taskId, activity) => running.get(taskId)?.noteActivity(activity),
      })
    : async () => {
        throw new Error('this coordinator was started without a way to ask people (no `people` option)');
      };
  const running = new Map<string, RunningTask>();
  const ackWaitMs = options.ackWaitMs ?? 30_000;
  const maxDeliver = options.maxDeliver ?? 10;
  /** How often a task being handled tells the server it is still working on it. */
  const keepAliveMs = Math.max(100, Math.floor(ackWaitMs / 3));
  let stopping = false;
  /**
   * Resolves 10 s after stop() begins: a task's end still waiting for its final event then leaves the message to a
   * redelivery, so a stop with NATS out of reach does not wait for it forever.
   */
  let markStopping: () => void = () => {};
  const stopped = new Promise<'stopping'>((resolve) => {
    markStopping = () => void sleep(clock, FINAL_EVENT_WAIT_MS).then(() => resolve('stopping'));
  });
  const now = () => new Date(clock.now()).toISOString();

  /**
   * A task that was delivered `maxDeliver` times in a row without making progress (coordinators kept dying under
   * it) is not run again: it is stored on the dead-letter subject with the reason, and ends with task.failed
   * (max_deliveries).
   */
  async function giveUp({ delivery, taskId, entry, stalls }: Triaged): Promise<Stage> {
    const existing = entry?.value;
    const message = `task ${taskId} was delivered ${stalls} times without finishing or making progress; it is given up on and stored on ${subjects.deadLetter(pipeline)}`;
    const scope = { pipeline, taskId, traceparent: existing ? traceOf(existing.snapshot) : newTraceparent() };
    const usage = existing?.usage ?? emptyUsage();
    const durationMs = existing ? Math.max(0, clock.now() - Date.parse(existing.createdAt)) : 0;
    const final = taskEvents.failed(scope, 'max_deliveries', message, usage, durationMs);
    // A token of this ending's own: a run that still thinks it owns the task finds another's and stops.
    const lease = randomUUID();
    const ended: WorkflowRecord = existing
      ? { ...existing, status: 'failed', state: 'failed', updatedAt: now(), final, lease }
      : {
          taskId,
          pipeline,
          streamSequence: delivery.streamSequence,
          status: 'failed',
          state: 'failed',
          goal: '',
          round: 1,
          usage,
          createdAt: now(),
          updatedAt: now(),
          final,
          lease,
        };
    // Only over the record as read: if another coordinator wrote it since, it runs the task, and this leaves it be.
    const written = await throughOutages(() =>
      entry ? store.update(taskId, ended, entry.revision) : store.create(taskId, ended),
    ).catch((error: unknown) => {
      logger.error({ err: error, taskId }, 'cannot record that the task was given up on');
      return undefined;
    });
    if (written === undefined) return { next: 'handBack' };
    logger.error({ taskId, deliveries: stalls }, message);
    await options.intake.deadLetter(pipeline, { ...delivery, deliveries: stalls }, { taskId, message });
    return { next: 'conclude', final, settle: 'term' };
  }

  /** The task's wall-clock deadline, counted from its acceptance (first delivery), when its version sets one. */
  function deadlineOf(flow: FlowVersion, createdAt: string | undefined): { deadline?: number } {
    const timeout = flow.config.budget?.timeout;
    if (timeout === undefined) return {};
    const accepted = createdAt === undefined ? clock.now() : Date.parse(createdAt);
    return { deadline: accepted + timeout * 1_000 };
  }

  /** An event that cannot be made or sent is logged, never thrown: it must not take the process down. */
  function publishSafely(taskId: string, make: () => TroupeEvent): Promise<boolean> {
    try {
      return bus.publishEvent(make());
    } catch (error) {
      logger.error({ err: error, taskId }, 'cannot publish an event; the task goes on');
      return Promise.resolve(false);
    }
  }

  /**
   * The one way a task ends, whatever ended it, once its record holds its final status and final event: the
   * event is published, the task's pending approvals and questions are closed, and its message is acked (or
   * terminated, when given up on) once the event is stored. A crash in between leaves the message to be delivered
   * again, and that delivery comes back here with the stored event (same id). The wait lasts as long as the outbox
   * holds the event (through a NATS outage or a backlog), the message kept alive meanwhile; it ends when the event
   * is stored or given up on.
   */
  async function conclude({
    delivery,
    final,
  }: {
    delivery: TaskDelivery;
    final: TroupeEvent;
  }): Promise<'settled' | 'left'> {
    const { taskId } = final;
    // Kept alive meanwhile: the wait for the event, and closing requests, can outlast a short ack wait.
    delivery.working();
    const stopKeepAlive = every(clock, keepAliveMs, () => delivery.working());
    try {
      const stored = publishSafely(taskId, () => final);
      // Leaving the message to a redelivery would only queue the same event again behind this one: say so, and wait.
      const slow = clock.setTimeout(
        () =>
          logger.warn(
            { taskId, unsentEvents: bus.pendingEvents },
            `the final event of task ${taskId} is not stored yet; the task's message is kept until it is`,
          ),
        FINAL_EVENT_WAIT_MS,
      );
      // Stopping for 10 s (NATS may be out of reach, and the wait endless): the message is left to be delivered again.
      const outcome = await Promise.race([stored, stopped]).finally(() => clock.clearTimeout(slow));
      if (outcome === 'stopping') {
        logger.warn(
          { taskId },
          `the final event of task ${taskId} is not stored yet and this coordinator is stopping; its message is left to be delivered again`,
        );
        return 'left';
      }
      // Given up on (refused, too big, or the outbox overflowed): delivering the task again would not change that.
      if (!outcome) logger.error({ taskId }, `the final event of task ${taskId} could not be stored`);
      await closeRequests(taskId, endingOf(final) ?? { status: 'failed' });
      parents.delete(taskId);
      return 'settled';
    } finally {
      stopKeepAlive();
    }
  }

  async function closeRequests(taskId: string, ending: TaskEnding): Promise<void> {
    if (!options.closeRequests) return;
    try {
      const closed = await options.closeRequests(taskId, ending);
      if (closed > 0)
        logger.info({ taskId, closed }, `closed ${closed} pending request(s) of the ended task`);
    } catch (error) {
      logger.warn({ err: error, taskId }, 'cannot close the pending approvals and questions of the task');
    }
  }

  /** Refuses a payload that is not a task, once: terminated, never delivered again, and reported on `_invalid`. */
  function refuse(delivery: TaskDelivery, parsed: Extract<ReturnType<typeof parseTask>, { ok: false }>) {
    const hint =
      parsed.limit === undefined ? '' : ` (raise the limit with troupe up ${LIMIT_FLAGS[parsed.limit]})`;
    const reason = `task for pipeline ${pipeline} refused: ${parsed.reason}${hint}`;
    logger.warn({ subject: delivery.subject, streamSequence: delivery.streamSequence }, reason);
    try {
      bus.reportInvalid({
        subject: delivery.subject,
        reporter: 'coordinator',
        reason,
        issues: parsed.issues,
        payload: new TextDecoder().decode(delivery.data.slice(0, 2_000)),
        pipeline,
      });
    } catch (error) {
      logger.error({ err: error }, 'cannot report the refused task');
    }
  }

  const parseTask = (data: Uint8Array) =>
    parseMessage(TaskSubmission, data, { maxBytes: limits.maxTaskBytes, maxDepth: limits.maxTaskDepth });

  /** Reads a delivered message and the task's record: what this delivery is, and what to do with it. */
  async function triage(delivery: TaskDelivery): Promise<Stage> {
    // Shutting down: leave the task to the next coordinator rather than start it here.
    if (stopping) return { next: 'handBack' };
    const parsed = parseTask(delivery.data);
    if (!parsed.ok) {
      refuse(delivery, parsed);
      return { next: 'refuse' };
    }
    const submission = parsed.value;
    const taskId = submission.id ?? idFromHeader(delivery) ?? derivedId(delivery);
    logMessage(logger, bus.messageLogLevel, 'in', delivery.subject, {
      taskId,
      from: 'user',
      to: pipeline,
      kind: 'task',
    });
    if (running.has(taskId)) return { next: 'leave' }; // a redelivery of a task this process is still running
    // A first delivery is almost always a new task: its claim creates the record, and reads it only when that finds
    // one (a resubmitted id, or this very claim whose reply was lost), which saves a round trip on each new task.
    const entry = delivery.deliveryCount > 1 ? await store.get(taskId) : undefined;
    if (entry && entry.value.streamSequence !== delivery.streamSequence) {
      logger.warn(
        { taskId, pipeline, first: entry.value.streamSequence, again: delivery.streamSequence },
        'task id already submitted; ignoring the resubmission',
      );
      return { next: 'ack' };
    }
    if (entry && entry.value.status !== 'running') {
      // Delivered again after the end: the coordinator that ended it may have died before its final event
      // went out (it is acknowledged only after). Publishing the stored one again is harmless: same id. So is
      // storing a dead letter again (same message id), in case that was what the crash cut short.
      const final = entry.value.final;
      if (final?.kind === 'task.failed' && final.data.reason === 'max_deliveries') {
        await options.intake.deadLetter(
          pipeline,
          { ...delivery, deliveries: delivery.deliveryCount },
          { taskId, message: final.data.message },
        );
      }
      return final ? { next: 'conclude', final } : { next: 'ack' };
    }
    // Checked after the finished and duplicate cases, so only a task that would run again is given up on. A task
    // never recorded died before its claim: every delivery of it so far made no progress.
    const stalls = entry ? stallsSoFar(entry.value) : delivery.deliveryCount - 1;
    const work: Triaged = { delivery, taskId, submission, entry, stalls };
    if (stalls >= maxDeliver) return { next: 'giveUp', work };
    // A task that resumes from a checkpoint has its input there (cut, with where the whole is): nothing to read.
    if (!submission.inputRef || entry?.value.snapshot !== undefined)
      return (await misfit(work)) ?? { next: 'claim', work };
    // An input too large for the message: read whole from where its submitter stored it. A store out of reach
    // throws, and the delivery comes back (each one counted as a stall, so one never readable ends dead-lettered).
    const stored = options.values
      ? await readStoredInput(options.values, pipeline, taskId, submission.inputRef, limits)
      : { ok: false as const, reason: 'this coordinator reads no stored inputs' };
    if (!stored.ok && entry) {
      // Claimed before, never checkpointed: the task is known, so it fails, saying why, rather than vanish.
      return { next: 'claim', work: { ...work, inputProblem: stored.reason } };
    }
    if (!stored.ok) {
      refuse(delivery, { ok: false, reason: stored.reason, issues: [] });
      return { next: 'refuse' };
    }
    const { inputRef: _read, ...rest } = submission;
    const whole: Triaged = {
      ...work,
      submission: { ...rest, input: stored.input },
      ...(stored.cut ? { inputCut: stored.cut } : {}),
    };
    return (await misfit(whole)) ?? { next: 'claim', work: whole };
  }

  /**
   * Refuses a new task whose input does not match the input schema of the version it would start on: it was never
   * meant for this pipeline. Clients check it before they submit; this is for any other NATS publisher.
   */
  async function misfit(work: Triaged): Promise<Stage | undefined> {
    if (work.entry) return undefined;
    const schema = (await versions.newest()).config.input;
    const fits = schema === undefined ? undefined : checkTaskInput(schema, work.submission.input);
    if (fits === undefined || fits.ok) return undefined;
    refuse(work.delivery, { ok: false, reason: fits.reason, issues: fits.issues });
    return { next: 'refuse' };
  }

  /** Claims the task in its record for this run (or creates the record), as the workflow's input. */
  async function claim(work: Triaged): Promise<Stage> {
    const { delivery, taskId, submission, entry, stalls, inputCut, inputProblem } = work;
    const existing = entry;
    const parent = submission.parent;
    // A task runs on the version it started on (or was migrated to); a new one on the newest.
    const started = existing ? undefined : await versions.newest();
    const version = existing ? existing.value.version : started?.hash;
    const flow = inputProblem ?? started ?? (await versions.flowFor(version));
    const input: WorkflowInput = {
      taskId,
      pipeline,
      goal: submission.goal,
      ...(submission.input ? { input: submission.input } : {}),
      ...(inputCut ? { inputCut } : {}),
      ...(submission.metadata ? { metadata: submission.metadata } : {}),
      // A sub-task's trace continues its parent's.
      traceparent: existing ? traceOf(existing.value.snapshot) : childTraceparent(parent?.traceparent),
      ...(typeof flow === 'string' ? {} : deadlineOf(flow, existing?.value.createdAt)),
      ...(parent ? { parent } : {}),
    };

    const scope: EventScope = { pipeline, taskId, traceparent: input.traceparent };
    const createdAt = existing?.value.createdAt ?? now();
    const progress = existing?.value.progress ?? 0;
    /** This run's claim on the task: whoever writes the record next with an older revision has lost it. */
    const lease: Lease = { token: randomUUID(), revision: 0, delivery: { progress, stalls } };
    if (existing) {
      const took = await store.update(
        taskId,
        { ...existing.value, lease: lease.token, delivery: lease.delivery, updatedAt: now() },
        existing.revision,
      );
      if (took === undefined) {
        // Another coordinator wrote the record meanwhile: let this delivery come back, and look again then.
        logger.warn({ taskId }, 'task record changed while resuming it; handing the delivery back');
        return { next: 'handBack' };
      }
      lease.revision = took;
    } else {
      const claimed = await store.create(taskId, {
        taskId,
        pipeline,
        streamSequence: delivery.streamSequence,
        status: 'running',
        state: started?.config.flow[0]?.id ?? 'completed',
        ...(version === undefined ? {} : { version }),
        goal: input.goal,
        ...(submission.metadata ? { metadata: submission.metadata } : {}),
        round: 1,
        usage: emptyUsage(),
        createdAt,
        updatedAt: now(),
        lease: lease.token,
        progress,
        delivery: lease.delivery,
      });
      // Absent: the key existed. Ours (same stream message, our write seen as failed) goes on; another's is a duplicate.
      const owner = claimed === undefined ? await store.get(taskId) : undefined;
      if (claimed === undefined && owner?.value.streamSequence !== delivery.streamSequence) {
        logger.warn(
          { taskId, pipeline, first: owner?.value.streamSequence, again: delivery.streamSequence },
          'task id already submitted; ignoring the resubmission',
        );
        return { next: 'ack' };
      }
      // Ours, with its reply lost: it bears another run's token only if that run took it over since.
      if (claimed === undefined && owner?.value.lease !== lease.token) return { next: 'handBack' };
      lease.revision = claimed ?? owner?.revision ?? 0;
      publishSafely(taskId, () =>
        events.make(
          'task.accepted',
          scope,
          {
            goal: submission.goal,
            ...(submission.input ? { input: submission.input } : {}),
            ...(inputCut ? { inputCut } : {}),
            ...(submission.metadata ? { metadata: submission.metadata } : {}),
            ...(parent
              ? {
                  parent: {
                    taskId: parent.taskId,
                    pipeline: parent.pipeline,
                    step: parent.step,
                    depth: parent.depth,
                  },
                }
              : {}),
          },
          { from: parent ? `task:${parent.taskId}` : 'user', to: pipeline },
        ),
      );
    }
    if (stopping) {
      // stop() began while this delivery was being claimed: leave it to the next coordinator, as a hand-back.
      const claimed = await store.get(taskId).catch(() => undefined);
      if (claimed?.value.lease === lease.token) {
        await store
          .update(
            taskId,
            { ...claimed.value, delivery: { ...lease.delivery, handedBack: true } },
            claimed.revision,
          )
          .catch(() => undefined);
      }
      return { next: 'handBack' };
    }
    // Watched for its parent's ending only while it runs here (see `parentWatch`).
    if (parent) parents.set(taskId, parent.taskId);
    else parents.delete(taskId);
    const run: Run = {
      firstDelivery: existing === undefined && delivery.deliveryCount === 1,
      input,
      delivery,
      scope,
      createdAt,
      snapshot: existing?.value.snapshot,
      lease,
      ...(version === undefined ? {} : { version }),
    };
    return { next: 'run', work: { run, flow } satisfies Claimed };
  }

  /** Each delivery's lifecycle, with this runner's stages. */
  const lifecycle = taskLifecycleMachine.provide({
    actors: {
      triage: fromPromise(({ input }) => triage(input)),
      claim: fromPromise(({ input }) => claim(input as Triaged)),
      giveUp: fromPromise(({ input }) => giveUp(input as Triaged)),
      run: fromPromise(({ input }) => {
        const { run, flow } = input as Claimed;
        return runWorkflow(run, {
          pipeline,
          store,
          clock,
          logger,
          // A task whose version cannot be had is failed by its run, saying why, without starting it.
          ...(typeof flow === 'string'
            ? {
                machine: current.machine,
                agentOfStep: current.agentOfStep,
                waitingSteps: current.waitingSteps,
                unavailable: flow,
              }
            : { machine: flow.machine, agentOfStep: flow.agentOfStep, waitingSteps: flow.waitingSteps }),
          events,
          taskEvents,
          orphaned: async (task) => {
            if (!task.parent) return undefined;
            const parent = (await store.get(task.parent.taskId))?.value;
            return parent && parent.status !== 'running'
              ? `its parent task ${task.parent.taskId} ${parent.status}`
              : undefined;
          },
          keepAliveMs,
          publish: publishSafely,
          running,
          stopping: () => stopping,
        });
      }),
      conclude: fromPromise(({ input }) => conclude(input)),
    },
    actions: {
      release: ({ context }) =>
        running.get((context.work as Claimed).run.input.taskId)?.end({ kind: 'stopped' }),
    },
  });
  /** The lifecycles of the deliveries being handled. */
  const lifecycles = new Set<ReturnType<typeof createActor<typeof lifecycle>>>();

  async function handle(delivery: TaskDelivery): Promise<void> {
    const task = createActor(lifecycle, { input: { delivery }, clock });
    lifecycles.add(task);
    try {
      task.start();
      const { error } = await toPromise(task);
      if (error !== undefined) throw error;
    } finally {
      lifecycles.delete(task);
    }
  }

  /** A claimed task: its run, and the flow of its version (or why that cannot be had). */
  interface Claimed {
    run: Run;
    flow: FlowVersion | string;
  }

  /** A delivery of a task that may run: what it carries, and the task's record as read. */
  interface Triaged {
    delivery: TaskDelivery;
    taskId: string;
    submission: TaskSubmission;
    entry: KvEntry<WorkflowRecord> | undefined;
    /** Deliveries in a row, this one included, that made no progress. */
    stalls: number;
    /** The keys of `submission.input` cut to previews of the stored input, and where the whole is. */
    inputCut?: InputCut;
    /** Why the stored input of a task claimed before cannot be read: its run fails it, saying so. */
    inputProblem?: string;
  }

  // Every coordinator hears every cancel; the one running the task stops it and answers. When none runs it, the
  // control responder (one per message, see controlResponder.ts) answers with the task's state instead.
  const control = bus.subscribe(
    subjects.allControl,
    ControlMessage,
    (delivery) => {
      const taskId = delivery.subject.slice(subjects.control('').length);
      const task = running.get(taskId);
      if (!task) return;
      const message = delivery.value;
      if (message.action === 'migrate') {
        void migrations.migrate(taskId, task, message.to).then(
          (reply) => delivery.respond(reply),
          (error: unknown) => {
            logger.error({ err: error, taskId }, 'cannot migrate the task');
            delivery.respond(
              refusal('not_migratable', `cannot migrate task ${taskId}: ${errorMessage(error)}`),
            );
          },
        );
        return;
      }
      if (task.cancel(message.reason))
        delivery.respond({ ok: true, taskId, outcome: 'cancelled' } satisfies ControlReceipt);
      else {
        delivery.respond({
          ok: false,
          error: { code: 'task_ended', message: `task ${taskId} is ending already; nothing was changed` },
        } satisfies ErrorReply);
      }
    },
    { reporter: 'coordinator' },
  );

  // A sub-task ends with its parent: any final event of a parent cancels its children running here.
  const parentWatch = bus.subscribeText(
    `${subjects.allEvents.slice(0, -1)}*.*.task.*`,
    (delivery) => {
      if (parents.size === 0) return;
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (!parsed.ok || !FINAL_EVENT_KINDS.includes(parsed.value.kind)) return;
      for (const [child, parent] of parents) {
        if (parent !== parsed.value.taskId) continue;
        const kind = parsed.value.kind.slice('task.'.length);
        if (running.get(child)?.cancel(`its parent task ${parent} ${kind}`)) {
          logger.info(
            { taskId: child, parent },
            `task ${child} cancelled: its parent task ${parent} ${kind}`,
          );
        }
      }
    },
    { messageLogLevel: 'debug' },
  );

  const queue: TaskQueue = await options.intake.start({
    pipeline,
    concurrency: options.concurrency,
    ...(options.maxInFlight === undefined ? {} : { maxInFlight: options.maxInFlight }),
    holdIntake: () => bus.pendingEvents >= EVENT_BACKLOG_HOLD,
    ackWaitMs,
    handle,
  });
  logger.info(
    { pipeline, consumer: queue.consumer, concurrency: options.concurrency },
    'pipeline is taking tasks',
  );

  return {
    pipeline,
    running: () => [...running.keys()],
    async prepare(hash) {
      const flow = await versions.flowFor(hash);
      return typeof flow === 'string' ? flow : undefined;
    },
    adopt: (hash) => versions.adopt(hash),
    async stop() {
      stopping = true;
      markStopping();
      control.unsubscribe();
      parentWatch.unsubscribe();
      for (const task of lifecycles) task.send({ type: 'stop' });
      await queue.stop();
    },
  };
}

/**
 * Deliveries in a row that ended without progress, counting the last one: it made none when the record's progress
 * has not moved since it claimed the task, unless it was handed back at a clean shutdown.
 */
function stallsSoFar(record: WorkflowRecord): number {
  const last = record.delivery;
  // Written before deliveries were tracked: count what the old record knew, the deliveries are unknown.
  if (last === undefined) return 0;
  if ((record.progress ?? 0) > last.progress) return 0;
  return last.handedBack ? last.stalls : last.stalls + 1;
}

/** `Nats-Msg-Id` doubles as the task id when the payload has none, so `nats pub -H Nats-Msg-Id:…` works. */
function idFromHeader(message: { headers: Record<string, string> }): string | undefined {
  const id = message.headers['Nats-Msg-Id'];
  return id !== undefined && isTaskId(id) ? id : undefined;
}

/** Deterministic for a stored message, so every redelivery of it gets the same id. */
function derivedId(message: { streamSequence: number; storedAt: number }): string {
  return `t${message.streamSequence}-${message.storedAt.toString(36)}`;
}

/** A new trace context for a task: in its parent task's trace (a new span id) when it has one, else a new trace. */
function childTraceparent(parent: string | undefined): string {
  const traceId = parent?.match(/^00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})$/);
  if (!traceId) return newTraceparent();
  return `00-${traceId[1]}-${newTraceparent().split('-')[2]}-${traceId[2]}`;
}

function traceOf(snapshot: unknown): string {
  const trace = (snapshot as { context?: { task?: { traceparent?: unknown } } } | undefined)?.context?.task
    ?.traceparent;
  return typeof trace === 'string' ? trace : newTraceparent();
}

/**
 * A step as the task's run in this process sends it: `fresh` on its first delivery, traced as a child of the run,
 * naming the version the task runs on.
 */
function stepOfRun(input: StepRunInput, run: RunningTask | undefined): StepRunInput {
  if (!run) return { ...input, firstDelivery: false };
  return {
    ...input,
    firstDelivery: run.firstDelivery,
    request: {
      ...input.request,
      traceparent: run.traceparent,
      ...(run.version === undefined ? {} : { version: run.version }),
    },
  };
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}
