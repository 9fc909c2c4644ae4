import type { StepActivity, WorkflowRecord } from '@troupe/protocol';
import { emptyUsage, errorMessage, type TroupeEvent, type UsageTotals } from '@troupe/protocol';
import {
  type Clock,
  type EventFactory,
  type EventScope,
  endSpan,
  every,
  isOutage,
  type KvStore,
  type Logger,
  startWorkflowSpan,
  type TraceSpan,
  throughOutages,
  traceparentOf,
} from '@troupe/runtime';
import { createActor, type Snapshot } from 'xstate';
import type { TaskDelivery } from '../intake/taskQueue.ts';
import { activeSteps, hearEndedItems, stepsAtWork, unfitItem, type WorkflowMachine } from './compileFlow.ts';
import type { TaskEvents } from './taskEvents.ts';
import type { Stage } from './taskLifecycle.ts';
import { endedTask, type ReleaseReason, type TaskOutput, type WorkflowInput } from './workflowTypes.ts';

/** Where workflow records live: the KV bucket `workflows`, as far as the runner uses it. */
export type WorkflowStore = Pick<KvStore<typeof WorkflowRecord>, 'get' | 'create' | 'update'>;

/** How a task's run ended. Whichever comes first counts; the others find the run already ending. */
type Ending =
  | { kind: 'done'; output: TaskOutput }
  /** This process is shutting down: the task is handed back to be resumed elsewhere. */
  | { kind: 'stopped' }
  /** Moved to another version of its pipeline (`troupe migrate`): handed back, to resume on that version. */
  | { kind: 'migrated'; version: string }
  /** Another coordinator owns the task now; this run leaves it alone. */
  | { kind: 'takenOver' }
  /** A fault while running the task (not while running a step): the task fails with `reason`. */
  | { kind: 'crashed'; reason: 'internal' | 'checkpoint_failed'; message: string; error: unknown };

/** What the workflow is told when its run ends from outside. */
const RELEASES: Record<Exclude<Ending, { kind: 'done' }>['kind'], ReleaseReason> = {
  stopped: 'shutdown',
  // As at a shutdown: what the step waits on (a person's answer, a sub-task) stays, for the run that resumes it.
  migrated: 'shutdown',
  takenOver: 'takenOver',
  crashed: 'checkpointFailed',
};

/** A run in progress, as the pipeline runner reaches it: to end it, cancel it, or note what its step does. */
export interface RunningTask {
  /** Ends the run; the first ending given wins, and only it gets true. */
  end(ending: Ending): boolean;
  /** Sends the workflow a cancel; false when its run is ending already (nothing is changed then). */
  cancel(reason: string | undefined): boolean;
  /** Records what the current step is doing, for `troupe status`. */
  noteActivity(activity: StepActivity): void;
  /**
   * Moves the task to pipeline version `version` when `problem` (given its checkpoint and input as they are now)
   * finds nothing against it: checked and let go in one turn, so no step reply can move the workflow in between. The
   * run then ends, writes the new version into the record and hands the task back, to resume on that version.
   * Returns why the task was not moved, or `recorded`, which settles with whether the new version was written.
   */
  migrate(
    version: string,
    problem: (snapshot: unknown, input: WorkflowInput) => string | undefined,
  ): string | { recorded: Promise<boolean> };
  /** The run is the task's first delivery: its steps' first sends are `fresh`. */
  readonly firstDelivery: boolean;
  /** The `traceparent` the run's steps carry: its `invoke_workflow` span's, when traces are exported. */
  readonly traceparent: string;
  /** The pipeline version the task runs on, which its steps name so hosts run that version's agents. */
  readonly version?: string;
}

/** What a run needs of its pipeline runner. */
export interface WorkflowRunServices {
  pipeline: string;
  store: WorkflowStore;
  clock: Clock;
  logger: Logger;
  /** The pipeline's workflow machine, its steps provided. */
  machine: WorkflowMachine;
  events: EventFactory;
  taskEvents: TaskEvents;
  /** The agent of each step, by the step's id (the workflow's state while it runs). */
  agentOfStep: ReadonlyMap<string, string>;
  /**
   * The steps that wait on something other than this task's work — a person (`human`), a sub-task (`pipeline`): a
   * task whose every active step is one holds no working slot.
   */
  waitingSteps: ReadonlySet<string>;
  /** Why a task must be cancelled as soon as it runs (a sub-task whose parent ended meanwhile), if it must. */
  orphaned?: (input: WorkflowInput) => Promise<string | undefined>;
  /** How often the task's message is kept alive while it runs. */
  keepAliveMs: number;
  /** Publishes an event, logging (never throwing) when it cannot be made or sent. */
  publish(taskId: string, make: () => TroupeEvent): Promise<boolean>;
  /** The runs in progress in this process, by task id: a run is in it while it goes. */
  running: Map<string, RunningTask>;
  /** Whether this process is stopping: a run that starts then is released at once (its task handed back). */
  stopping(): boolean;
  /** Why the task's version cannot be run here (it is not stored): the task fails as `unresumable`, saying so. */
  unavailable?: string;
}

export /** This run's claim on a task: its token, the record revision it last wrote, and its delivery's progress mark. */
interface Lease {
  token: string;
  revision: number;
  delivery: { progress: number; stalls: number };
}

export interface Run {
  /** The task's first delivery, which created its record: none of its steps can have run before. */
  firstDelivery: boolean;
  input: WorkflowInput;
  delivery: TaskDelivery;
  scope: EventScope;
  createdAt: string;
  snapshot: unknown;
  lease: Lease;
  /** The hash of the pipeline version the task runs on; absent for a task from before versions were kept. */
  version?: string;
}

/**
 * Runs the task's workflow to its end, or until it is released, and records how it ended; the lifecycle goes on
 * from what this returns.
 */
export async function runWorkflow(run: Run, services: WorkflowRunServices): Promise<Stage> {
  const {
    pipeline,
    store,
    clock,
    logger,
    machine,
    events,
    taskEvents,
    agentOfStep,
    waitingSteps,
    keepAliveMs,
    running,
  } = services;
  const now = () => new Date(clock.now()).toISOString();
  const { input, delivery, scope, createdAt, lease } = run;
  const { taskId } = input;
  let { revision } = lease;
  let progress = lease.delivery.progress;
  let takenOver = false;
  let resolveEnding: (ending: Ending) => void = () => {};
  const ended = new Promise<Ending>((resolve) => (resolveEnding = resolve));
  /** How the run ends: the first ending given wins; false for the others. */
  let ending: Ending | undefined;
  const settleEnding = (next: Ending): boolean => {
    if (ending !== undefined) return false;
    ending = next;
    resolveEnding(next);
    return true;
  };
  const actor = createActor(machine, {
    input,
    clock,
    ...(run.snapshot === undefined ? {} : { snapshot: run.snapshot as Snapshot<unknown> }),
  });
  /**
   * Ends the run from outside the workflow (shutdown, takeover, a checkpoint that cannot be made): the workflow is
   * sent `release`, which ends it `released` (never checkpointed) and its step call with it.
   */
  const end = (next: Exclude<Ending, { kind: 'done' }>): boolean => {
    const won = settleEnding(next);
    if (won && actor.getSnapshot().status === 'active')
      actor.send({ type: 'release', why: RELEASES[next.kind] });
    return won;
  };
  /** The record as this run writes it: the task, this run's claim and progress, and where the workflow is. */
  const recordOf = (
    fields: Pick<WorkflowRecord, 'status' | 'state' | 'round' | 'usage' | 'snapshot' | 'final' | 'activity'>,
  ): WorkflowRecord => ({
    taskId,
    pipeline,
    streamSequence: delivery.streamSequence,
    goal: input.goal,
    ...(input.metadata ? { metadata: input.metadata } : {}),
    createdAt,
    updatedAt: now(),
    lease: lease.token,
    progress,
    delivery: lease.delivery,
    ...(run.version === undefined ? {} : { version: run.version }),
    ...definedOnly(fields),
  });
  /**
   * Writes the record only if it is still as this run last left it. A conflict means another coordinator
   * took the task over (this one was cut off longer than the ack wait): this run stops at once.
   */
  const fenced = async (value: WorkflowRecord): Promise<boolean> => {
    if (takenOver) return false;
    const written = await throughOutages(() => store.update(taskId, value, revision));
    if (written !== undefined) {
      revision = written;
      return true;
    }
    // Our own write whose reply was lost bears our token; another coordinator's does not.
    const current = await throughOutages(() => store.get(taskId));
    if (current?.value.lease === lease.token) {
      revision = current.revision;
      return true;
    }
    takenOver = true;
    logger.warn({ taskId }, `task ${taskId} was taken over by another coordinator; stopping it here`);
    end({ kind: 'takenOver' });
    return false;
  };
  /**
   * Writes the ending of a workflow that completed or failed without its snapshot, when the checkpoint with it
   * did not land. False when it cannot be written either: the message is then left to be delivered again.
   */
  const recordEnding = async (
    output: TaskOutput,
    event: TroupeEvent,
    context: { usage: UsageTotals; round: number },
  ): Promise<boolean> => {
    const record = recordOf({
      status: output.status,
      state: output.status,
      round: context.round,
      usage: context.usage,
      final: event,
    });
    const written = await fenced(record).catch((error: unknown) => {
      logger.error(
        { err: error, taskId },
        `cannot record that task ${taskId} ${output.status}; it will run again`,
      );
      return false;
    });
    return written;
  };
  /** Writes the record of a failure other than the workflow's own, with its final event; false if taken over. */
  const recordFailure = async (
    final: TroupeEvent,
    context: { usage: UsageTotals; round: number },
  ): Promise<boolean> =>
    fenced(
      recordOf({ status: 'failed', state: 'failed', round: context.round, usage: context.usage, final }),
    ).catch((error: unknown) => {
      logger.error({ err: error, taskId }, `cannot record that task ${taskId} failed`);
      return true;
    });

  const restored = actor.getSnapshot();
  // A foreach item's workflow is restored apart from the task's: one that does not fit leaves the task's active.
  const unfit =
    services.unavailable !== undefined
      ? { error: new Error(services.unavailable) }
      : restored.status === 'error'
        ? { error: restored.error }
        : unfitItem(restored);
  if (unfit) {
    // The checkpoint does not fit its version's flow (or that version is gone): end the task, loudly.
    const message =
      services.unavailable !== undefined
        ? `task ${taskId} cannot resume: ${services.unavailable}`
        : `task ${taskId} cannot resume: its checkpoint does not fit ${run.version === undefined ? `pipeline ${pipeline} as loaded now` : `version ${run.version.slice(0, 12)} of pipeline ${pipeline}`} (${errorMessage(unfit.error)})`;
    logger.error({ taskId }, message);
    const durationMs = Math.max(0, clock.now() - Date.parse(createdAt));
    const final = taskEvents.failed(scope, 'unresumable', message, emptyUsage(), durationMs);
    const recorded = await recordFailure(final, { usage: emptyUsage(), round: 1 });
    return recorded ? { next: 'conclude', final } : { next: 'leave' };
  }
  actor.on('event', (emitted) => {
    const route = {
      ...(emitted.from === undefined ? {} : { from: emitted.from }),
      ...(emitted.to === undefined ? {} : { to: emitted.to }),
    };
    services.publish(taskId, () => events.make(emitted.kind, scope, emitted.data as never, route));
  });
  let writes = Promise.resolve();
  let final: TroupeEvent | undefined;
  /** The record as this run last wrote it (or is about to). */
  let latest: WorkflowRecord | undefined;
  /** Queued after the writes before it, so the record's revisions follow the workflow's transitions. */
  /** Whether the record with the final status and event is stored. */
  let finalWritten = false;
  const write = (record: WorkflowRecord, onFailure: (error: unknown) => void) => {
    latest = record;
    writes = writes
      .then(() => fenced(record))
      .then((ok) => {
        if (ok && record.final !== undefined) finalWritten = true;
      })
      .catch(onFailure);
  };
  const noteActivity = (activity: StepActivity) => {
    // Waiting on a person or a slow model, the task does no work: its working slot goes to another task meanwhile.
    delivery.park(activity.kind === 'person' || activity.kind === 'model');
    // The checkpoint that entered the step already says its agent works on it: the first heartbeat adds nothing.
    if (latest?.status !== 'running' || sameActivity(latest.activity, activity)) return;
    write({ ...latest, activity, updatedAt: now() }, (error) =>
      logger.warn({ err: error, taskId }, 'cannot record what the step is doing'),
    );
  };
  /** The first snapshot of a run rewrites the one it resumed from; each later one records a transition. */
  let firstCheckpoint = true;
  /** A snapshot that cannot be made or stored fails this task (logged as it ends); it never reaches the process. */
  const poisoned = (error: unknown) =>
    end({
      kind: 'crashed',
      reason: 'checkpoint_failed',
      message: `cannot checkpoint task ${taskId}: ${errorMessage(error)}`,
      error,
    });
  const persist = () => {
    let checkpoint: WorkflowRecord;
    try {
      const snap = actor.getSnapshot();
      const active = activeSteps(snap.value);
      // A foreach step works in its items: the steps they are in.
      const atWork = stepsAtWork(snap);
      // A transition: the workflow works again (a step replied), so the task takes a working slot — unless all it
      // does now is wait (on people, or on a sub-task), alone or in every branch or item still going.
      const onPeople =
        snap.status === 'active' && atWork.length > 0 && atWork.every((s) => waitingSteps.has(s));
      delivery.park(onPeople);
      const state = active.join('+');
      const ended = snap.status === 'done' && endedTask(snap.output) ? snap.output : undefined;
      const status = ended?.status ?? 'running';
      const snapshot = actor.getPersistedSnapshot();
      // The final event goes into the same write as the final status, so no crash can separate them.
      if (ended) {
        final = taskEvents.final(scope, ended, Math.max(0, clock.now() - Date.parse(createdAt)));
      }
      if (!firstCheckpoint) progress += 1;
      firstCheckpoint = false;
      const { round, usage } = snap.context;
      // One of the steps at work, for `troupe status` and the dashboard: the first, when branches run at once.
      const working = status === 'running' ? atWork.find((step) => agentOfStep.has(step)) : undefined;
      const agent = working === undefined ? undefined : agentOfStep.get(working);
      // Waiting on people only: the question their step put keeps being what the task waits on.
      const asked = latest?.activity?.kind === 'person' && atWork.includes(latest.activity.step);
      const activity =
        working !== undefined && agent !== undefined
          ? { kind: 'agent' as const, step: working, agent, since: now() }
          : onPeople && asked
            ? latest?.activity
            : undefined;
      checkpoint = recordOf({ status, state, round, usage, snapshot, final, activity });
    } catch (error) {
      poisoned(error);
      return;
    }
    // Retried through a reconnect: a lost checkpoint means more of the task runs again after a crash.
    write(checkpoint, (error) => {
      // NATS stayed out of reach: the task goes on, and a crash now would resume it from an older checkpoint.
      if (isOutage(error)) logger.error({ err: error, taskId }, 'cannot checkpoint workflow');
      else poisoned(error);
    });
  };
  actor.subscribe({
    next: (snap) => {
      // Let go by end(), which settled how the run ends: the last checkpoint stands, for the next run.
      if (snap.status === 'done' && !endedTask(snap.output)) return;
      if (snap.status === 'active' || snap.status === 'done') persist();
      if (snap.status === 'done' && endedTask(snap.output))
        settleEnding({ kind: 'done', output: snap.output });
    },
    error: (error) =>
      settleEnding({
        kind: 'crashed',
        reason: 'internal',
        message: `the workflow actor crashed: ${errorMessage(error)}`,
        error,
      }),
  });
  /** Settles with whether the version a migration ended this run for was recorded. */
  let migrationRecorded: (recorded: boolean) => void = () => {};
  const migrate = (
    version: string,
    problem: (snapshot: unknown, input: WorkflowInput) => string | undefined,
  ): string | { recorded: Promise<boolean> } => {
    if (ending !== undefined || actor.getSnapshot().status !== 'active')
      return `task ${taskId} is ending already`;
    // Checked and ended in one turn: no step reply can move the workflow in between.
    const why = problem(actor.getPersistedSnapshot(), input);
    if (why !== undefined) return why;
    const recorded = new Promise<boolean>((resolve) => (migrationRecorded = resolve));
    end({ kind: 'migrated', version });
    return { recorded };
  };
  /** A cancel is an event of the workflow: it ends in `cancelled`, by the same path as any end of its own. */
  const cancel = (reason: string | undefined): boolean => {
    if (ending !== undefined || actor.getSnapshot().status !== 'active') return false;
    actor.send({ type: 'cancel', ...(reason ? { reason } : {}) });
    return true;
  };
  const span = startWorkflowSpan(pipeline, scope.traceparent, run.firstDelivery, {
    'troupe.task.id': taskId,
    'troupe.pipeline': pipeline,
    'troupe.delivery': delivery.deliveryCount,
  });
  running.set(taskId, {
    end,
    cancel,
    noteActivity,
    migrate,
    firstDelivery: run.firstDelivery,
    traceparent: traceparentOf(span, scope.traceparent),
    ...(run.version === undefined ? {} : { version: run.version }),
  });
  const stopHeartbeat = every(clock, keepAliveMs, () => delivery.working());
  try {
    actor.start();
    hearEndedItems(actor);
    // Stopping began after the claim, before this run was in `running` for stop() to release: release it now.
    if (services.stopping()) end({ kind: 'stopped' });
    else if (run.snapshot !== undefined) {
      services.publish(taskId, () =>
        events.make(
          'task.resumed',
          scope,
          {
            state: activeSteps(restored.value).join('+'),
            round: restored.context.round,
            deliveries: delivery.deliveryCount,
          },
          { from: 'workflow', to: pipeline },
        ),
      );
    }
    // A sub-task whose parent ended while it waited to run here ends too.
    void services.orphaned?.(run.input).then(
      (why) => why !== undefined && cancel(why),
      () => undefined,
    );
    const outcome = await ended;
    await writes;
    // Another coordinator runs the task now: it publishes, acks or hands back; this one leaves it alone.
    if (takenOver || outcome.kind === 'takenOver') return { next: 'leave' };
    // Measured from acceptance, so a resumed task reports its whole life.
    const durationMs = Math.max(0, clock.now() - Date.parse(createdAt));
    const context = actor.getSnapshot().context;
    switch (outcome.kind) {
      case 'done': {
        const completed = final ?? taskEvents.final(scope, outcome.output, durationMs);
        // The last checkpoint did not land (it was too big, say): the ending is recorded without the snapshot.
        if (!finalWritten && !(await recordEnding(outcome.output, completed, context)))
          return { next: 'leave' };
        return { next: 'conclude', final: completed };
      }
      case 'stopped':
        await recordHandBack(taskId, fenced, services);
        return { next: 'handBack' };
      case 'migrated': {
        const recorded = await recordHandBack(taskId, fenced, services, outcome.version);
        migrationRecorded(recorded);
        if (recorded) {
          logger.info(
            { taskId, version: outcome.version },
            `task ${taskId} moved to version ${outcome.version.slice(0, 12)}`,
          );
        } else {
          // Taken over meanwhile, or NATS out of reach past every retry: the record still names the old version.
          logger.error(
            { taskId, version: outcome.version },
            `task ${taskId} was let go to move to version ${outcome.version.slice(0, 12)}, but its record could not be written; it resumes on the version it ran on`,
          );
        }
        return { next: 'handBack' };
      }
      case 'crashed': {
        // A fault of ours or of the task's data, not of the network: retrying would fail again.
        logger.error({ err: outcome.error, taskId }, outcome.message);
        const failed = taskEvents.failed(scope, outcome.reason, outcome.message, context.usage, durationMs);
        return (await recordFailure(failed, context))
          ? { next: 'conclude', final: failed }
          : { next: 'leave' };
      }
    }
  } finally {
    // A migration whose run ended otherwise (taken over meanwhile) moved nothing.
    migrationRecorded(false);
    stopHeartbeat();
    running.delete(taskId);
    endRunSpan(span, ending);
  }
}

/** Ends a run's span with how the run ended: the task's status, or why this run let it go. */
function endRunSpan(span: TraceSpan, ending: Ending | undefined): void {
  if (ending?.kind === 'done') {
    const { status, failure } = ending.output;
    endSpan(span, failure ? { type: failure.reason, message: failure.message } : undefined, {
      'troupe.task.status': status,
      'troupe.rounds': ending.output.rounds,
    });
    return;
  }
  if (ending?.kind === 'crashed') {
    endSpan(span, { type: ending.reason, message: ending.message }, { 'troupe.task.status': 'failed' });
    return;
  }
  // Let go: the task goes on in another run (or was never run here).
  endSpan(span, undefined, { 'troupe.run.released': ending?.kind ?? 'unknown' });
}

/** Shutdown: the task goes back to NATS, to be resumed from its checkpoint by a coordinator. */
async function recordHandBack(
  taskId: string,
  fenced: (value: WorkflowRecord) => Promise<boolean>,
  { store, logger }: Pick<WorkflowRunServices, 'store' | 'logger'>,
  version?: string,
): Promise<boolean> {
  return throughOutages(() => store.get(taskId))
    .then((current) => {
      const delivery = current?.value.delivery;
      // A record from before deliveries were tracked has nothing to mark, but a migration still names its version.
      if (current === undefined || (delivery === undefined && version === undefined)) return false;
      // A clean stop is not a failure to make progress: the next delivery does not count this one.
      return fenced({
        ...current.value,
        ...(delivery === undefined ? {} : { delivery: { ...delivery, handedBack: true } }),
        ...(version === undefined ? {} : { version }),
      });
    })
    .catch((error: unknown) => {
      logger.warn({ err: error, taskId }, 'cannot record the hand-back');
      return false;
    });
}

/** Whether a step's activity is the one already recorded (its `since` aside). */
function sameActivity(recorded: StepActivity | undefined, next: StepActivity): boolean {
  if (recorded?.kind !== next.kind || recorded.step !== next.step || recorded.agent !== next.agent)
    return false;
  return recorded.kind !== 'person' || next.kind !== 'person' || recorded.request.id === next.request.id;
}

function definedOnly<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
