import { setMaxListeners } from 'node:events';
import type { QueuedStore } from '@troupe/client';
import {
  ControlMessage,
  type ControlReceipt,
  type ControlRefusal,
  type ErrorReply,
  errorMessage,
  FINAL_EVENT_KINDS,
  parseEvent,
  subjects,
  type TaskEnding,
  type TroupeEvent,
} from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  type Delivery,
  EventFactory,
  type LocalSteps,
  type Logger,
  sleep,
  type ValueStore,
} from '@troupe/runtime';
import { type AnyActorRef, fromPromise, toPromise } from 'xstate';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { versionHash } from '../config/pipelineVersion.ts';
import { notSteering } from '../control/controlResponder.ts';
import { FINAL_EVENT_WAIT_MS } from '../intake/conclude.ts';
import { DEFAULT_INTAKE_LIMITS, type IntakeLimits } from '../intake/intakeLimits.ts';
import type { TaskDelivery, TaskIntake, TaskQueue } from '../intake/taskQueue.ts';
import { checkpointLingerOf, type DEFAULT_CHECKPOINT_LINGER_MS } from '../task/checkpointWriter.ts';
import { FinalEvents } from '../task/finalEvents.ts';
import {
  type DEFAULT_PASSIVATE_AFTER_MS,
  passivationOf,
  runTask,
  type TaskActor,
} from '../task/passivation.ts';
import { reportActivity, runFactsOf, steeringOf, untilOwedStored } from '../task/runContext.ts';
import { createTaskMachine } from '../task/taskMachine.ts';
import type { TaskServices, WorkflowStore } from '../task/taskServices.ts';
import { type SteerAnswer, type TaskSignal, TaskSignals } from '../task/taskSignals.ts';
import { compileFlow } from './compileFlow.ts';
import { FlowVersions } from './flowVersions.ts';
import { createHumanStepRunner, type HumanStepDeps } from './humanStep.ts';
import type { PeopleInFlight } from './peopleInFlight.ts';
import type { SendsInFlight } from './sendsInFlight.ts';
import { createStepCallLogic } from './stepCall.ts';
import { type StepRunnerOptions, stepCallServices } from './stepRunner.ts';
import { followParentHold, forwardTold, type ToldForwarding, whileHeld } from './subTaskSteering.ts';
import { TaskMigrations } from './taskMigrations.ts';
import type { HumanRunInput, HumanRunOutput, PipelineRunInput, PipelineRunOutput } from './workflowTypes.ts';

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
  /**
   * The most tasks of this pipeline this process works on at once (the coordinator's default is 16). A task whose
   * step waits on a person or a slow model is parked and does not count, so waiting tasks cannot starve the pipeline.
   */
  concurrency: number;
  /** The most tasks of this pipeline this process holds at once, parked or working (default 1,000). */
  maxInFlight?: number;
  /** How long a task may go unacknowledged before redelivery (default 30 s; kept alive while it runs). */
  ackWaitMs?: number;
  /**
   * Deliveries in a row that made no progress (wrote no new checkpoint) before a task is given up on and
   * dead-lettered (default 10). A hand-back at shutdown is not counted.
   */
  maxDeliver?: number;
  /** How long a step waits for a worker to serve its agent (default 30 s). */
  noResponderWaitMs?: number;
  /** How often agent hosts report on a step; three missed reports and it goes to another worker (default 5 s). */
  stepHeartbeatMs?: number;
  /**
   * How long a task's end waits for its final event to be stored before it logs that it still waits, and how long a
   * stop waits for such an end before it leaves the message to a redelivery (default 10 s).
   */
  finalEventWaitMs?: number;
  /** How large and deep a task payload may be (default 256 KiB and 64 levels). */
  limits?: IntakeLimits;
  /** Where inputs too large for a task message are read from (the pipeline's inputs bucket); without it, a task with one is refused. */
  values?: Pick<ValueStore, 'read'>;
  /** Marks of tasks submitted through the gateway and not claimed yet (KV `queued`): a claim takes them. */
  queued?: QueuedStore;
  /** Runs `pipeline` steps' sub-tasks; without it, a `pipeline` step fails the task saying so. */
  subPipelines?: (
    input: PipelineRunInput,
    signal: AbortSignal,
    stopping: () => boolean,
  ) => Promise<PipelineRunOutput>;
  /** What `human` steps ask people with; without it, a `human` step fails the task saying so. */
  people?: Omit<HumanStepDeps, 'onActivity'>;
  /**
   * The agent hosts of this process: a step one of them takes (it serves the agent at the task's version and has
   * room) runs here with no NATS hop; any other goes over NATS (see `LocalSteps`). Without it, every step does.
   */
  localSteps?: LocalSteps;
  /** Closes a task's pending approvals and questions once it has ended; returns how many it closed. */
  closeRequests?: (taskId: string, ending: TaskEnding) => Promise<number>;
  /**
   * Holds a task's pending approvals and questions as its pause is recorded, and lets them go at its resume, beside
   * their askers (an asker down then holds nothing); returns how many it changed.
   */
  holdRequests?: TaskServices['holdRequests'];
  /**
   * Told of each task whose message was settled after its end, with its final event (once stored): online scoring's
   * cue (`evals/onlineScoring.ts`), and the version it ran on (absent when unknown: a task from before versions were
   * kept, or one concluded again from its record). Not told of a task left to another delivery, told in its turn.
   */
  ended?: (final: TroupeEvent, version?: string) => void;
  /**
   * How long a task's steps must have only waited (a step's send in flight on a slow model or a person) before its
   * actor tree is stopped, to be restored when something comes for it (see `task/passivation.ts`): default
   * {@link DEFAULT_PASSIVATE_AFTER_MS}; 0 turns passivation off.
   */
  passivateAfterMs?: number;
  /**
   * How long the checkpoint that records a step's output, when the step ran here and no journal holds its final reply,
   * may wait for the next record write while only steps run here follow: default
   * {@link DEFAULT_CHECKPOINT_LINGER_MS}; 0 writes every checkpoint, each at once (none held back, none left for a
   * newer one queued behind a write in flight). A crash meanwhile asks those steps'
   * models again (docs/durability.md, "A local step's final reply").
   */
  checkpointLingerMs?: number;
}

/** Runs one pipeline's tasks: one task actor tree per delivery, events on the wire, checkpoints in KV. */
export interface PipelineRunner {
  readonly pipeline: string;
  /** Task ids running in this process now (passivated ones too). */
  running(): string[];
  /** How many of them are passivated now (see `task/passivation.ts`). */
  passivated(): number;
  /** Reads and compiles a stored version ahead of its tasks; says why when it cannot be run. */
  prepare(hash: string): Promise<string | undefined>;
  /**
   * Makes a prepared version what new tasks start on when the registry cannot be read: a reload here made it the
   * newest, as a restart with its file would make it this coordinator's own.
   */
  adopt(hash: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

/**
 * Events waiting to be stored by `EVENTS` (this process's, every pipeline's) above which no new task is pulled:
 * the tasks in flight produce events faster than they go out, and more tasks would only lengthen the queue (whose
 * bound, 10,000, drops the oldest events).
 */
const EVENT_BACKLOG_HOLD = 2_000;

/**
 * Starts taking one pipeline's tasks. Read top to bottom: the steps' actors and the pipeline's versions, the
 * services every task shares, the one control subscription and the one parent watch (both feeding the task
 * actors' signals), then intake, which creates one task actor per delivery (see `task/taskMachine.ts`).
 */
export async function startPipelineRunner(options: PipelineRunnerOptions): Promise<PipelineRunner> {
  const { bus, config, store, logger, clock } = options;
  const pipeline = config.name;
  const signals = new TaskSignals();
  const ackWaitMs = options.ackWaitMs ?? 30_000;
  // How often a task being handled tells the server it is still working on it.
  const keepAliveMs = Math.max(100, Math.floor(ackWaitMs / 3));
  const passivation = passivationOf(options.passivateAfterMs, { clock, logger, keepAliveMs, signals });
  const checkpointLingerMs = checkpointLingerOf(options.checkpointLingerMs);
  let stopping = false;
  const stop = new AbortController();
  const stopped = stop.signal;
  // Every task ending at once listens on it (each takes its listener off when done): past Node's 10 it would warn
  // of a leak that is none.
  setMaxListeners(0, stopped);
  const markStopping = () =>
    void sleep(clock, options.finalEventWaitMs ?? FINAL_EVENT_WAIT_MS).then(() => stop.abort());

  const versions: FlowVersions = new FlowVersions({
    pipeline,
    config,
    hash: options.version ?? versionHash(config, {}),
    compile: (versionConfig) =>
      compileFlow(
        versionConfig,
        stepActors(
          { ...options, ...(passivation ? { sends: passivation.sends, inFlight: passivation.people } : {}) },
          () => migrations,
          () => stopping,
        ),
      ),
    source: {
      ...(options.loadVersion ? { load: options.loadVersion } : {}),
      ...(options.newest ? { newest: options.newest } : {}),
      ...(options.versionHashes ? { hashes: options.versionHashes } : {}),
    },
    logger,
  });
  const people = options.people;
  const migrations = new TaskMigrations({
    pipeline,
    versions,
    signals,
    ...(people?.gate.leavePending ? { leavePending: (stepId) => people.gate.leavePending?.(stepId) } : {}),
    clock,
    logger,
  });
  const events = new EventFactory(clock);
  const services: TaskServices = {
    pipeline,
    bus,
    store,
    clock,
    logger,
    events,
    finalEvents: new FinalEvents(events, pipeline),
    versions,
    deadLetter: (...args) => options.intake.deadLetter(...args),
    taskEvents: (...args) => options.intake.taskEvents(...args),
    limits: options.limits ?? DEFAULT_INTAKE_LIMITS,
    ...(options.values ? { values: options.values } : {}),
    ...(options.queued ? { queued: options.queued } : {}),
    maxDeliver: options.maxDeliver ?? 10,
    keepAliveMs,
    checkpointLingerMs,
    ...(options.finalEventWaitMs === undefined ? {} : { finalEventWaitMs: options.finalEventWaitMs }),
    signals,
    ...(options.closeRequests ? { closeRequests: options.closeRequests } : {}),
    ...(options.holdRequests ? { holdRequests: options.holdRequests } : {}),
    stopping: () => stopping,
    stopped,
    ...(passivation ? { passivation } : {}),
  };
  const taskMachine = createTaskMachine(services);

  // Every coordinator hears every cancel; the one running the task stops it and answers. When none runs it, the
  // control responder (one per message, see controlResponder.ts) answers with the task's state instead.
  const control = bus.subscribe(
    subjects.allControl,
    ControlMessage,
    (delivery) => controlTask(delivery, { signals, migrations, logger }),
    { reporter: 'coordinator' },
  );

  // A person's pause, resume or tell on this pipeline's steering subject, which NATS permissions can grant for some
  // pipelines only (the approver role's); a cancel or migration is refused there (see controlResponder.ts).
  const steering = bus.subscribe(
    subjects.pipelineSteer(pipeline),
    ControlMessage,
    (delivery) => {
      const taskId = delivery.subject.slice(subjects.steer(pipeline, '').length);
      if (!signals.has(taskId)) return;
      const message = delivery.value;
      if (message.action === 'cancel' || message.action === 'migrate') {
        delivery.respond(notSteering(taskId, pipeline));
        return;
      }
      signals.send(
        taskId,
        steerSignal(message, (reply) => delivery.respond(reply)),
      );
    },
    { reporter: 'coordinator' },
  );

  // A sub-task ends with its parent: any final event of a parent cancels its children running here.
  const parentWatch = bus.subscribeText(
    `${subjects.allEvents.slice(0, -1)}*.*.task.*`,
    (delivery) => {
      if (!signals.hasChildren) return;
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (!parsed.ok || !FINAL_EVENT_KINDS.includes(parsed.value.kind)) return;
      const parent = parsed.value.taskId;
      signals.parentEnded(parent, `its parent task ${parent} ${parsed.value.kind.slice('task.'.length)}`);
    },
    { messageLogLevel: 'debug' },
  );

  /**
   * One delivery, one task actor, whose tree lives until the message is settled; when passivated, it is stopped while
   * it waits, and a new one goes on from where it stood once it is woken (see `task/passivation.ts`). Nothing of the
   * runner waits on a sleeping task but its waking.
   */
  const handle = (delivery: TaskDelivery): Promise<void> =>
    runTask(taskMachine, delivery, { clock, passivation }).then(finish);

  /** The task actor that ran a delivery's task to its end: a fault of ours in it fails the handler. */
  async function finish(task: TaskActor): Promise<void> {
    const { error } = await toPromise(task).catch((fault: unknown) => {
      // A fault of ours inside the task actor: nothing of the task (its workflow, step call, signals listener) may go
      // on, or the task is heard as running here and every redelivery of it is ignored.
      stopChildrenOfErrored(task);
      throw fault;
    });
    if (error !== undefined) throw error;
    const { value, context } = task.getSnapshot();
    if (context.final && (value === 'acked' || value === 'terminated'))
      options.ended?.(context.final, context.flow?.hash ?? context.claimed?.version);
  }

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
    running: () => signals.taskIds(),
    passivated: () => passivation?.passivated ?? 0,
    async prepare(hash) {
      const flow = await versions.flowFor(hash);
      return typeof flow === 'string' ? flow : undefined;
    },
    adopt: (hash) => versions.adopt(hash),
    async stop() {
      stopping = true;
      markStopping();
      control.unsubscribe();
      steering.unsubscribe();
      parentWatch.unsubscribe();
      signals.stop();
      await queue.stop();
      passivation?.close();
    },
  };
}

/**
 * The actors a workflow's steps invoke, as this runner provides them. Each reads its task's run facts and reports its
 * activity through the run context of the task actor system it runs in (see `task/runContext.ts`).
 */
function stepActors(
  options: PipelineRunnerOptions & { sends?: SendsInFlight; inFlight?: PeopleInFlight },
  migrations: () => TaskMigrations,
  stopping: () => boolean,
) {
  const stepOptions: StepRunnerOptions = {
    bus: options.bus,
    clock: options.clock,
    logger: options.logger,
    ...(options.noResponderWaitMs === undefined ? {} : { noResponderWaitMs: options.noResponderWaitMs }),
    ...(options.stepHeartbeatMs === undefined ? {} : { heartbeatMs: options.stepHeartbeatMs }),
    ...(options.localSteps ? { local: options.localSteps } : {}),
    ...(options.sends ? { sends: options.sends } : {}),
  };
  const people = options.people;
  const reporter =
    (system: Parameters<typeof reportActivity>[0]) =>
    (_taskId: string, activity: Parameters<typeof reportActivity>[1]) =>
      reportActivity(system, activity);
  return {
    // Built once: each agent step's call is the workflow's child, reading its run's facts from the task's tree.
    runStep: createStepCallLogic(stepCallServices(stepOptions)),
    askPerson: fromPromise<HumanRunOutput, HumanRunInput>(({ input, signal, system }) => {
      if (!people)
        throw new Error('this coordinator was started without a way to ask people (no `people` option)');
      const askNow = () => {
        const ask = createHumanStepRunner({
          ...people,
          onActivity: reporter(system),
          steering: steeringOf(system),
          inFlight: options.inFlight,
        });
        return migrations().asking(input.taskId, input.stepId, () => ask(input, signal));
      };
      // A person's request is kept: an output owed to the task's record by the step before is stored first.
      const owed = untilOwedStored(system);
      return owed === true
        ? askNow()
        : owed.then((stored) => {
            storedOrThrow(stored, input.stepId);
            return askNow();
          });
    }),
    runPipeline: fromPromise<PipelineRunOutput, PipelineRunInput>(async ({ input, signal, system }) => {
      if (!options.subPipelines)
        throw new Error('this coordinator cannot run sub-pipelines (no `subPipelines` option)');
      // The sub-task is submitted only while its parent is not held, then paused and resumed with it.
      const steering = steeringOf(system);
      const { id: subTaskId, parent } = input.task;
      // At work from its start (its restored run said so before the first checkpoint): messages told are kept for it.
      const ended = steering?.atWork(subTaskId);
      let told: ToldForwarding | undefined;
      try {
        // A later delivery may find the sub-task submitted by an earlier run and paused with its parent then: it is
        // sent a resume once the parent goes on, since the letting go that would have sent one came before this.
        const restored = runFactsOf(system)?.firstDelivery === false;
        if (steering) await whileHeld(steering, signal);
        // A sub-task is submitted for good: an output owed to the task's record by the step before is stored first.
        const owed = untilOwedStored(system);
        if (owed !== true) storedOrThrow(await owed, parent.step);
        // Left while held (cancelled, say): no sub-task is submitted.
        if (signal.aborted) throw new Error(`step ${parent.step} was left before its sub-task started`);
        const unfollow = steering
          ? followParentHold(options, subTaskId, parent.taskId, steering, restored)
          : undefined;
        // The parent's messages go to the sub-task, whose agent at work reads them.
        told = steering ? forwardTold(options, subTaskId, parent.taskId, steering, signal) : undefined;
        let output: PipelineRunOutput;
        try {
          // A step left because this coordinator stops leaves its sub-task running, for the run that resumes it.
          output = await options.subPipelines(
            input,
            signal,
            () => stopping() || migrations().moving(parent.taskId),
          );
        } finally {
          unfollow?.();
        }
        // What its agents read goes to no later step; the step's end records that, as an agent step's reply does.
        if (told && steering) steering.read(await told.settle(output.ok), subTaskId);
        return output;
      } finally {
        told?.stop();
        ended?.();
      }
    }),
  };
}

/**
 * Goes on once an output a step of this process owed the task's record is stored (see `CheckpointWriter.owe`); throws
 * when it will not be: the task is lost to another coordinator, or its run here is over.
 */
function storedOrThrow(stored: boolean, step: string): void {
  if (!stored)
    throw new Error(
      `step ${step} did not start: the task's record of the steps before it could not be stored`,
    );
}

/** A control message for a task running here (any other is left to the control responder), as its signal. */
function controlTask(
  delivery: Delivery<ControlMessage>,
  { signals, migrations, logger }: { signals: TaskSignals; migrations: TaskMigrations; logger: Logger },
): void {
  const taskId = delivery.subject.slice(subjects.control('').length);
  if (!signals.has(taskId)) return;
  const message = delivery.value;
  if (message.action === 'migrate') {
    void migrations.migrate(taskId, message.to).then(
      (reply) => delivery.respond(reply),
      (error: unknown) => {
        logger.error({ err: error, taskId }, 'cannot migrate the task');
        delivery.respond(refusal('not_migratable', `cannot migrate task ${taskId}: ${errorMessage(error)}`));
      },
    );
    return;
  }
  if (message.action !== 'cancel') {
    signals.send(
      taskId,
      steerSignal(message, (reply) => delivery.respond(reply)),
    );
    return;
  }
  signals.send(taskId, {
    type: 'cancel',
    ...(message.reason === undefined ? {} : { reason: message.reason }),
    answer: (taken) =>
      delivery.respond(
        taken
          ? ({ ok: true, taskId, outcome: 'cancelled' } satisfies ControlReceipt)
          : refusal('task_ended', `task ${taskId} is ending already; nothing was changed`),
      ),
  });
}

/** A pause, resume or tell as the signal its task actor hears, answered with `answer`. */
function steerSignal(
  message: Extract<ControlMessage, { action: 'pause' | 'resume' | 'tell' }>,
  answer: SteerAnswer,
): TaskSignal {
  const by = message.by === undefined ? {} : { by: message.by };
  if (message.action === 'tell') {
    const key = message.key === undefined ? {} : { key: message.key };
    return { type: 'tell', text: message.text, ...by, ...key, answer };
  }
  if (message.action === 'resume') return { type: 'resume', ...by, answer };
  return {
    type: 'pause',
    ...by,
    ...(message.reason === undefined ? {} : { reason: message.reason }),
    answer,
  };
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}

/**
 * Stops the children an errored actor leaves running. XState 5.33 does not stop them when their parent errors (see
 * `_stopProcedure` in its createActor.ts) and refuses `stop()` on a non-root actor; `_stop` is how XState stops a
 * child itself. xstate is pinned: the pipeline runner's test of a failing task actor shows a change.
 */
function stopChildrenOfErrored(actor: AnyActorRef): void {
  for (const child of Object.values<AnyActorRef | undefined>(actor.getSnapshot().children)) {
    (child as { _stop?: () => void } | undefined)?._stop?.();
  }
}
