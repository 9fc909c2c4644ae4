import { randomUUID } from 'node:crypto';
import {
  ControlMessage,
  type ControlReceipt,
  emptyUsage,
  isTaskId,
  parseMessage,
  subjects,
  TaskSubmission,
  type TroupeEvent,
  type UsageTotals,
} from '@troupe/protocol';
import {
  type Clock,
  deadLetter,
  EventFactory,
  type EventScope,
  HAND_BACK_DELAY_MS,
  type IdGenerator,
  type KvStore,
  type Logger,
  logMessage,
  type NatsBus,
  newTraceparent,
  preview,
  startTaskQueue,
  type TaskDelivery,
  type TaskQueue,
  throughOutages,
} from '@troupe/runtime';
import { type Actor, createActor, fromPromise, type Snapshot } from 'xstate';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { compileFlow, type WorkflowMachine } from './compileFlow.ts';
import { createStepRunner } from './stepRunner.ts';
import type { WorkflowRecord } from './workflowRecord.ts';
import type { WorkflowInput, WorkflowOutput } from './workflowTypes.ts';

export interface PipelineRunnerOptions {
  bus: NatsBus;
  config: PipelineConfig;
  store: KvStore<typeof WorkflowRecord>;
  logger: Logger;
  clock: Clock;
  ids: IdGenerator;
  /** The most tasks of this pipeline this process runs at once. */
  concurrency: number;
  ackWaitMs?: number;
  /** Deliveries of one task before it is given up on and dead-lettered (default 10; a shutdown counts as one). */
  maxDeliver?: number;
  noResponderWaitMs?: number;
  /** How often agent hosts report on a step (see `createStepRunner`). */
  stepHeartbeatMs?: number;
}

/** Runs one pipeline's tasks: one workflow actor per task, events on the wire, snapshots in KV. */
export interface PipelineRunner {
  readonly pipeline: string;
  /** Task ids running in this process now. */
  running(): string[];
  stop(): Promise<void>;
}

/** Outputs in events are cut here (the whole output stays in the checkpoint), so an event fits a NATS message. */
const MAX_EVENT_OUTPUT = 256 * 1024;
/** How long a task's end waits for its final event to be stored before leaving it to a redelivery. */
const FINAL_EVENT_WAIT_MS = 10_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

type Ending =
  | { kind: 'done'; output: WorkflowOutput }
  | { kind: 'stopped' }
  | { kind: 'crashed'; error: unknown };

const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error));

interface RunningTask {
  actor: Actor<WorkflowMachine>;
  delivery: TaskDelivery;
}

export async function startPipelineRunner(options: PipelineRunnerOptions): Promise<PipelineRunner> {
  const { bus, config, store, logger, clock } = options;
  const pipeline = config.name;
  const events = new EventFactory(clock, options.ids);
  const runStep = createStepRunner({
    bus,
    clock,
    logger,
    ...(options.noResponderWaitMs === undefined ? {} : { noResponderWaitMs: options.noResponderWaitMs }),
    ...(options.stepHeartbeatMs === undefined ? {} : { heartbeatMs: options.stepHeartbeatMs }),
  });
  const machine = compileFlow(config).provide({
    actors: { runStep: fromPromise(({ input, signal }) => runStep(input, signal)) },
  });
  const running = new Map<string, RunningTask>();
  const cancelled = new Map<string, { reason?: string }>();
  const ackWaitMs = options.ackWaitMs ?? 30_000;
  const maxDeliver = options.maxDeliver ?? 10;
  let stopping = false;

  /**
   * A task delivered more often than allowed (coordinators kept dying or stopping under it) is not run again:
   * it is stored on the dead-letter subject with the reason, and ends with task.failed (max_deliveries).
   */
  async function giveUp(delivery: TaskDelivery, taskId: string, counted: number): Promise<void> {
    const runs = counted - 1;
    const message = `task ${taskId} was delivered ${runs} times without finishing; it is given up on and stored on ${subjects.deadLetter(pipeline)}`;
    await deadLetter(bus, pipeline, { ...delivery, deliveries: runs }, { taskId, message });
    const existing = (await store.get(taskId))?.value;
    if (existing) {
      await store.put(taskId, {
        ...existing,
        status: 'failed',
        state: 'failed',
        updatedAt: new Date(clock.now()).toISOString(),
      });
    }
    const scope = { pipeline, taskId, traceparent: existing ? traceOf(existing.snapshot) : newTraceparent() };
    const durationMs = existing ? Math.max(0, clock.now() - Date.parse(existing.createdAt)) : 0;
    publishFailure(scope, 'max_deliveries', message, existing?.usage ?? emptyUsage(), durationMs);
    logger.error({ taskId, deliveries: runs }, message);
    delivery.term('max deliveries');
  }

  /** The task's wall-clock deadline, counted from its acceptance (first delivery), when the pipeline sets one. */
  function deadlineOf(createdAt: string | undefined): { deadline?: number } {
    const timeout = config.budget?.timeout;
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
   * Publishes a task's final event and acks its message once the event is stored, so a crash in between leaves
   * the message to be delivered again (and the stored event published again). Not stored in time: the message
   * is left unacknowledged, for that redelivery.
   */
  async function endWith(taskId: string, delivery: TaskDelivery, make: () => TroupeEvent): Promise<void> {
    delivery.working();
    const stored = publishSafely(taskId, make);
    const outcome = await Promise.race([stored, sleep(FINAL_EVENT_WAIT_MS).then(() => 'timeout' as const)]);
    if (outcome === 'timeout') {
      logger.warn(
        { taskId },
        `the final event of task ${taskId} is not stored yet; its message is left to be delivered again`,
      );
      return;
    }
    // Given up on (refused, too big, or the outbox overflowed): delivering the task again would not change that.
    if (!outcome) logger.error({ taskId }, `the final event of task ${taskId} could not be stored`);
    delivery.ack();
  }

  async function handle(delivery: TaskDelivery): Promise<void> {
    if (stopping) {
      // Shutting down: leave the task to the next coordinator rather than start it here.
      delivery.nak(HAND_BACK_DELAY_MS);
      return;
    }
    const parsed = parseMessage(TaskSubmission, delivery.data);
    if (!parsed.ok) {
      bus.reportInvalid({
        subject: delivery.subject,
        reporter: 'coordinator',
        reason: `task for pipeline ${pipeline} refused: ${parsed.reason}`,
        issues: parsed.issues,
        payload: new TextDecoder().decode(delivery.data.slice(0, 2_000)),
        pipeline,
      });
      delivery.term('invalid task payload');
      return;
    }
    const submission = parsed.value;
    const taskId = submission.id ?? idFromHeader(delivery) ?? derivedId(delivery);
    logMessage(logger, 'info', 'in', delivery.subject, { taskId, from: 'user', to: pipeline, kind: 'task' });
    if (running.has(taskId)) return; // a redelivery of a task this process is still running
    const existing = await store.get(taskId);
    if (existing && existing.value.streamSequence !== delivery.streamSequence) {
      logger.warn(
        { taskId, pipeline, first: existing.value.streamSequence, again: delivery.streamSequence },
        'task id already submitted; ignoring the resubmission',
      );
      delivery.ack();
      return;
    }
    if (existing && existing.value.status !== 'running') {
      // Delivered again after the end: the coordinator that ended it may have died before its final event
      // went out (it is acknowledged only after). Publishing the stored one again is harmless: same id.
      const final = existing.value.final;
      if (final) await endWith(taskId, delivery, () => final);
      else delivery.ack();
      return;
    }
    // Checked after the finished and duplicate cases, so only a task that would run again is given up on.
    // A clean shutdown's hand-back is a delivery too, but not a failure to finish: it does not count.
    const counted = delivery.deliveryCount - (existing?.value.handBacks ?? 0);
    if (counted > maxDeliver) {
      await giveUp(delivery, taskId, counted);
      return;
    }
    const input: WorkflowInput = {
      taskId,
      pipeline,
      goal: submission.goal,
      ...(submission.input ? { input: submission.input } : {}),
      ...(submission.metadata ? { metadata: submission.metadata } : {}),
      traceparent: existing ? traceOf(existing.value.snapshot) : newTraceparent(),
      ...deadlineOf(existing?.value.createdAt),
    };
    const scope: EventScope = { pipeline, taskId, traceparent: input.traceparent };
    const createdAt = existing?.value.createdAt ?? new Date(clock.now()).toISOString();
    /** This run's claim on the task: whoever writes the record next with an older revision has lost it. */
    const runner = randomUUID();
    let revision: number;
    if (existing) {
      const took = await store.update(
        taskId,
        { ...existing.value, runner, updatedAt: new Date(clock.now()).toISOString() },
        existing.revision,
      );
      if (took === undefined) {
        // Another coordinator wrote the record meanwhile: let this delivery come back, and look again then.
        logger.warn({ taskId }, 'task record changed while resuming it; handing the delivery back');
        delivery.nak(HAND_BACK_DELAY_MS);
        return;
      }
      revision = took;
    } else {
      const claimed = await store.create(taskId, {
        ...record(
          input,
          delivery,
          'running',
          config.flow[0]?.id ?? 'completed',
          1,
          emptyUsage(),
          createdAt,
          clock,
          undefined,
        ),
        runner,
      });
      // Absent: the key existed. Ours (same stream message, our write seen as failed) goes on; another's is a duplicate.
      const owner = claimed === undefined ? await store.get(taskId) : undefined;
      if (claimed === undefined && owner?.value.streamSequence !== delivery.streamSequence) {
        logger.warn({ taskId, pipeline }, 'task id claimed by another submission; ignoring this delivery');
        delivery.ack();
        return;
      }
      // Ours, with its reply lost: it bears another run's token only if that run took it over since.
      if (claimed === undefined && owner?.value.runner !== runner) {
        delivery.nak(HAND_BACK_DELAY_MS);
        return;
      }
      revision = claimed ?? owner?.revision ?? 0;
      publishSafely(taskId, () =>
        events.make(
          'task.accepted',
          scope,
          {
            goal: submission.goal,
            ...(submission.input ? { input: submission.input } : {}),
            ...(submission.metadata ? { metadata: submission.metadata } : {}),
          },
          { from: 'user', to: pipeline },
        ),
      );
    }
    if (stopping) {
      // stop() began while this delivery was being looked up: leave it to the next coordinator.
      delivery.nak(HAND_BACK_DELAY_MS);
      return;
    }
    await runTask(input, delivery, scope, createdAt, existing?.value.snapshot, { runner, revision });
  }

  async function runTask(
    input: WorkflowInput,
    delivery: TaskDelivery,
    scope: EventScope,
    createdAt: string,
    snapshot: unknown,
    lease: { runner: string; revision: number },
  ): Promise<void> {
    let { revision } = lease;
    let takenOver = false;
    /**
     * Writes the record only if it is still as this run last left it. A conflict means another coordinator
     * took the task over (this one was cut off longer than the ack wait): this run stops at once.
     */
    const fenced = async (value: WorkflowRecord): Promise<boolean> => {
      if (takenOver) return false;
      const written = await throughOutages(() =>
        store.update(input.taskId, { ...value, runner: lease.runner }, revision),
      );
      if (written !== undefined) {
        revision = written;
        return true;
      }
      // Our own write whose reply was lost bears our token; another coordinator's does not.
      const current = await throughOutages(() => store.get(input.taskId));
      if (current?.value.runner === lease.runner) {
        revision = current.revision;
        return true;
      }
      takenOver = true;
      logger.warn(
        { taskId: input.taskId },
        `task ${input.taskId} was taken over by another coordinator; stopping it here`,
      );
      actor.stop();
      return false;
    };
    const actor = createActor(machine, {
      input,
      ...(snapshot === undefined ? {} : { snapshot: snapshot as Snapshot<unknown> }),
    });
    const restored = actor.getSnapshot();
    if (restored.status === 'error') {
      // The checkpoint does not fit the flow as loaded now (the pipeline changed since): end the task, loudly.
      const message = `task ${input.taskId} cannot resume: its checkpoint does not fit pipeline ${pipeline} as loaded now (${errorMessage(restored.error)})`;
      logger.error({ taskId: input.taskId }, message);
      await fenced(
        record(input, delivery, 'failed', 'failed', 1, emptyUsage(), createdAt, clock, undefined),
      ).catch(() => undefined);
      publishFailure(
        scope,
        'unresumable',
        message,
        emptyUsage(),
        Math.max(0, clock.now() - Date.parse(createdAt)),
      );
      delivery.ack();
      return;
    }
    actor.on('event', (emitted) => {
      const route = {
        ...(emitted.from === undefined ? {} : { from: emitted.from }),
        ...(emitted.to === undefined ? {} : { to: emitted.to }),
      };
      publishSafely(input.taskId, () => events.make(emitted.kind, scope, emitted.data as never, route));
    });
    let writes = Promise.resolve();
    let final: TroupeEvent | undefined;
    const persist = () => {
      const snap = actor.getSnapshot();
      const state = typeof snap.value === 'string' ? snap.value : JSON.stringify(snap.value);
      const status = snap.status === 'done' ? (snap.output?.status ?? 'failed') : 'running';
      const persisted = actor.getPersistedSnapshot();
      // The final event goes into the same write as the final status, so no crash can separate them.
      if (snap.status === 'done') {
        try {
          final = finalEvent(scope, snap.output, Math.max(0, clock.now() - Date.parse(createdAt)));
        } catch (error) {
          logger.error({ err: error, taskId: input.taskId }, 'cannot make the final event');
        }
      }
      const checkpoint = {
        ...record(
          input,
          delivery,
          status,
          state,
          snap.context.round,
          snap.context.usage,
          createdAt,
          clock,
          persisted,
        ),
        ...(final ? { final } : {}),
      };
      // Retried through a reconnect: a lost checkpoint means more of the task runs again after a crash.
      writes = writes
        .then(() => fenced(checkpoint))
        .then(() => undefined)
        .catch((error: unknown) =>
          logger.error({ err: error, taskId: input.taskId }, 'cannot checkpoint workflow'),
        );
    };
    const finished = new Promise<Ending>((resolve) => {
      actor.subscribe({
        next: (snap) => {
          if (snap.status === 'active' || snap.status === 'done') persist();
          if (snap.status === 'done') resolve({ kind: 'done', output: snap.output });
        },
        // Stopping the actor (shutdown) completes it without output.
        complete: () => resolve({ kind: 'stopped' }),
        error: (error) => resolve({ kind: 'crashed', error }),
      });
    });
    running.set(input.taskId, { actor, delivery });
    const heartbeat = setInterval(() => delivery.working(), Math.max(100, Math.floor(ackWaitMs / 3)));
    try {
      actor.start();
      if (snapshot !== undefined) {
        publishSafely(input.taskId, () =>
          events.make(
            'task.resumed',
            scope,
            {
              state: String(restored.value),
              round: restored.context.round,
              deliveries: delivery.deliveryCount,
            },
            { from: 'workflow', to: pipeline },
          ),
        );
      }
      const ending = await finished;
      await writes;
      // Another coordinator runs the task now: it publishes, acks or hands back; this one leaves it alone.
      if (takenOver) return;
      // Measured from acceptance, so a resumed task reports its whole life.
      const durationMs = Math.max(0, clock.now() - Date.parse(createdAt));
      switch (ending.kind) {
        case 'done':
          await endWith(input.taskId, delivery, () => final ?? finalEvent(scope, ending.output, durationMs));
          return;
        case 'stopped': {
          const cancel = cancelled.get(input.taskId);
          if (cancel === undefined) {
            // Shutdown: hand the task back so a coordinator resumes it from its checkpoint.
            await throughOutages(() => store.get(input.taskId))
              .then((current) =>
                current ? fenced({ ...current.value, handBacks: (current.value.handBacks ?? 0) + 1 }) : false,
              )
              .catch((error: unknown) =>
                logger.warn({ err: error, taskId: input.taskId }, 'cannot count the hand-back'),
              );
            delivery.nak(HAND_BACK_DELAY_MS);
            return;
          }
          const { usage, round } = actor.getSnapshot().context;
          await fenced(
            record(input, delivery, 'cancelled', 'cancelled', round, usage, createdAt, clock, undefined),
          ).catch((error: unknown) =>
            logger.error({ err: error, taskId: input.taskId }, 'cannot record the cancel'),
          );
          bus.publishEvent(
            events.make(
              'task.cancelled',
              scope,
              { ...(cancel.reason ? { reason: cancel.reason } : {}), usage },
              { from: 'user', to: pipeline },
            ),
          );
          delivery.ack();
          return;
        }
        case 'crashed': {
          // A bug, not bad input: retrying would crash again, so the task ends here, loudly.
          const message = `the workflow actor crashed: ${errorMessage(ending.error)}`;
          logger.error({ err: ending.error, taskId: input.taskId }, message);
          const { usage, round } = actor.getSnapshot().context;
          await fenced(
            record(input, delivery, 'failed', 'failed', round, usage, createdAt, clock, undefined),
          ).catch(() => undefined);
          publishFailure(scope, 'internal', message, usage, durationMs);
          delivery.ack();
          return;
        }
      }
    } finally {
      clearInterval(heartbeat);
      running.delete(input.taskId);
      cancelled.delete(input.taskId);
    }
  }

  function finalEvent(scope: EventScope, output: WorkflowOutput, durationMs: number): TroupeEvent {
    if (output.status === 'completed') {
      return events.make(
        'task.completed',
        scope,
        {
          output: preview(output.output, MAX_EVENT_OUTPUT),
          ...(output.approved === undefined ? {} : { approved: output.approved }),
          rounds: output.rounds,
          usage: output.usage,
          usageByAgent: output.usageByAgent,
          durationMs,
        },
        { from: 'workflow', to: 'user' },
      );
    }
    const failure = output.failure ?? { reason: 'failed', message: 'the workflow failed' };
    return failureEvent(scope, failure.reason, failure.message, output.usage, durationMs, failure.step);
  }

  function failureEvent(
    scope: EventScope,
    reason: string,
    message: string,
    usage: UsageTotals,
    durationMs: number,
    step?: string,
  ): TroupeEvent {
    return events.make(
      'task.failed',
      scope,
      { reason, message: preview(message, MAX_EVENT_OUTPUT), usage, durationMs, ...(step ? { step } : {}) },
      { from: 'workflow', to: 'user' },
    );
  }

  function publishFailure(...args: Parameters<typeof failureEvent>): void {
    publishSafely(args[0].taskId, () => failureEvent(...args));
  }

  // Every coordinator hears every cancel; the one running the task stops it and answers.
  const control = bus.subscribe(
    subjects.allControl,
    ControlMessage,
    (delivery) => {
      const taskId = delivery.subject.slice(subjects.control('').length);
      const task = running.get(taskId);
      if (!task) return;
      cancelled.set(taskId, delivery.value.reason ? { reason: delivery.value.reason } : {});
      task.actor.stop();
      delivery.respond({ ok: true, taskId, outcome: 'cancelled' } satisfies ControlReceipt);
    },
    { reporter: 'coordinator' },
  );

  const queue: TaskQueue = await startTaskQueue(bus, {
    pipeline,
    concurrency: options.concurrency,
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
    async stop() {
      stopping = true;
      control.unsubscribe();
      for (const task of running.values()) task.actor.stop();
      await queue.stop();
    },
  };
}

function record(
  input: WorkflowInput,
  delivery: TaskDelivery,
  status: WorkflowRecord['status'],
  state: string,
  round: number,
  usage: UsageTotals,
  createdAt: string,
  clock: Clock,
  snapshot: unknown,
): WorkflowRecord {
  return {
    taskId: input.taskId,
    pipeline: input.pipeline,
    streamSequence: delivery.streamSequence,
    status,
    state,
    goal: input.goal,
    round,
    usage,
    createdAt,
    updatedAt: new Date(clock.now()).toISOString(),
    snapshot,
  };
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

function traceOf(snapshot: unknown): string {
  const trace = (snapshot as { context?: { task?: { traceparent?: unknown } } } | undefined)?.context?.task
    ?.traceparent;
  return typeof trace === 'string' ? trace : newTraceparent();
}
