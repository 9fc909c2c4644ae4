import { createHash, randomUUID } from 'node:crypto';
import {
  buildTaskTrace,
  cancelQueued,
  cancelTask,
  type FamilySubmitOptions,
  forkTask,
  listHumanRequests,
  OperationError,
  openQueuedStore,
  openWorkflowStore,
  pauseTask,
  readHumanRequest,
  readQueued,
  readTask,
  readTaskEvents,
  readValues,
  replyToHuman,
  restartTask,
  resumeTask,
  submitToPipeline,
  subTaskReader,
  type TaskTrace,
  tellTask,
  wholeTrace,
  withSubTasks,
} from '@troupe/client';
import {
  type ClientTask,
  DEFAULT_TASK_LIMITS,
  type DecisionBody,
  type DecisionResult,
  type FamilyResult,
  FINAL_EVENT_KINDS,
  type ForkBody,
  type HumanRequest,
  onItsSubject,
  type PauseBody,
  type PauseResult,
  type QueuedTask,
  type RestartBody,
  type ResumeBody,
  type ResumeResult,
  subjects,
  type TaskLimits,
  type TaskList,
  type TaskListStatus,
  type TaskSubmission,
  type TaskView,
  type TellBody,
  type TellResult,
  TroupeEvent,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type JetStreamBus, ValueStore } from '@troupe/runtime';
import { authorize, mayTouch, type Principal } from './auth.ts';
import { GatewayError } from './gatewayError.ts';
import { decodePlace, encodePlace } from './pageCursor.ts';
import { TaskIds } from './taskIds.ts';
import { hasStatus, isQueued, linksOf, queuedViewOf, viewOf } from './taskView.ts';

/** A request the gateway refuses before doing anything: 400 `invalid_request`. */
export class InvalidRequest extends GatewayError {
  override readonly name = 'InvalidRequest';

  constructor(message: string, options?: ErrorOptions) {
    super('invalid_request', 400, message, options);
  }
}

export interface GatewayActionsOptions {
  /** The longest `?wait=` honoured, in seconds (300). */
  maxWaitSeconds?: number;
  /** What a task may be: the coordinators' own limits (the protocol's defaults unless they were changed). */
  taskLimits?: TaskLimits;
  /** Makes the ids of idempotency keys; a random secret (ids that hold in this process only) when absent. */
  taskIds?: TaskIds;
  /** Where outputs too large for a message are read back whole; a store on the bus when absent. */
  values?: ValueStore;
  /** How long a tell waits for its coordinator's answer, in ms (10 s, as `tellTask`'s). */
  tellAnswerMs?: number;
}

/**
 * What a gateway client can do, whichever way it asked (HTTP or WebSocket): each action checks the principal's
 * scope and pipelines first, then acts through the coordinator's operations, and answers with the API's shapes.
 * It throws `AuthRefusal`, `OperationError` or `InvalidRequest`, which each transport turns into its own errors.
 */
export class GatewayActions {
  readonly #bus: JetStreamBus;
  readonly #maxWaitSeconds: number;
  /** Aborted when the gateway stops: a `?wait=` under way is answered then, not cut when the stop's grace ends. */
  readonly #stopping = new AbortController();
  readonly #limits: TaskLimits;
  readonly #ids: TaskIds;
  readonly #values: ValueStore;
  readonly #tellAnswerMs: number | undefined;
  /** KV `queued`, once a coordinator has made it. */
  #queued: Awaited<ReturnType<typeof openQueuedStore>>;
  /** When to try opening KV `queued` again, after it could not be. */
  #queuedRetryAt = 0;

  constructor(bus: JetStreamBus, options: GatewayActionsOptions = {}) {
    this.#values = options.values ?? new ValueStore(bus);
    this.#bus = bus;
    this.#maxWaitSeconds = options.maxWaitSeconds ?? 300;
    this.#limits = options.taskLimits ?? DEFAULT_TASK_LIMITS;
    this.#ids = options.taskIds ?? TaskIds.random();
    this.#tellAnswerMs = options.tellAnswerMs;
  }

  /** Ends every `?wait=` under way, each answered with its task as it stands (`202`): the gateway is stopping. */
  stopWaiting(): void {
    this.#stopping.abort();
  }

  /**
   * Submits a task. The id is the task's own, else derived from an idempotency key (the same key from the same token
   * is the same task), else fresh. With `waitSeconds`, waits that long for it to end. `done` says whether the view
   * holds its result. A task the coordinators would refuse (larger or deeper than their limits) is refused here,
   * before anything is stored: 413 or 400, with the reason.
   */
  async submit(
    who: Principal,
    pipeline: string,
    body: ClientTask,
    options: { idempotencyKey?: string; waitSeconds?: number } = {},
  ): Promise<{ done: boolean; view: TaskView }> {
    authorize(who, 'submit', pipeline);
    // Only a pipeline step says whose child a task is: a client's `parent` would tie its task to another's end.
    if ((body as TaskSubmission).parent !== undefined) {
      throw new InvalidRequest('parent: set by a pipeline step, never by a client');
    }
    const task: ClientTask & { id: string } = {
      ...body,
      id:
        body.id ??
        (options.idempotencyKey ? this.#ids.fromKey(who.name, options.idempotencyKey) : this.#ids.fresh()),
    };
    const wait = Math.min(options.waitSeconds ?? 0, this.#maxWaitSeconds);
    // This pipeline's events only: an id TASKS took for a duplicate may be another pipeline's queued task.
    const final = wait > 0 ? finalEventOf(this.#bus, task.id, pipeline, this.#stopping.signal) : undefined;
    try {
      const queued = await this.#queuedStore();
      const submitted = await submitToPipeline(this.#bus, pipeline, task, {
        values: this.#values,
        limits: this.#limits,
        ...(queued ? { queued: { store: queued, now: () => new Date().toISOString() } } : {}),
      });
      const flag = submitted.duplicate ? { duplicate: true } : {};
      const known = submitted.record;
      // An id another pipeline's task has is not this one's: say it is taken, show nothing of that task.
      if (known && known.pipeline !== pipeline) {
        throw new OperationError('conflict', `task id ${task.id} is taken by a task of another pipeline`);
      }
      if (known && known.status !== 'running')
        return { done: true, view: { ...(await this.#wholeView(known)), ...flag } };
      if (final && (await final.within(wait * 1_000))) {
        // Published already: a record that cannot be read now is no error, the task is there.
        const record = await readTask(this.#bus, task.id).catch(() => undefined);
        if (record?.pipeline === pipeline)
          return { done: record.status !== 'running', view: { ...(await this.#wholeView(record)), ...flag } };
      }
      const view: TaskView = known
        ? viewOf(known)
        : { taskId: task.id, pipeline, goal: task.goal, status: 'submitted', links: linksOf(task.id) };
      return { done: false, view: { ...view, ...flag } };
    } finally {
      final?.stop();
    }
  }

  /** A task as its record says, with its steps from its events when asked. */
  async task(who: Principal, taskId: string, withSteps = false): Promise<TaskView> {
    const found = await this.followable(who, taskId);
    if (isQueued(found)) return { ...queuedViewOf(found), ...(withSteps ? { steps: [] } : {}) };
    const record = found;
    const view = await this.#wholeView(record);
    if (!withSteps) return view;
    const trace = await this.#trace(record);
    return {
      ...view,
      steps: trace.steps.map((s) => ({
        stepId: s.stepId,
        step: s.step,
        agent: s.agent,
        round: s.round,
        ...(s.outcome
          ? {
              ok: s.outcome.ok,
              durationMs: s.outcome.durationMs,
              usage: s.outcome.usage,
              ...(s.outcome.verdict ? { verdict: s.outcome.verdict.decision } : {}),
              ...(s.outcome.error ? { error: s.outcome.error.code } : {}),
            }
          : {}),
      })),
    };
  }

  /** A task's trace, with the outputs its events name by reference read back whole. */
  async trace(who: Principal, taskId: string): Promise<TaskTrace> {
    const trace = await this.#trace(await this.readable(who, taskId));
    // A pipeline step's sub-task is the task's own work: its trace goes in its step, unless it is of a pipeline this
    // token may not touch (then it stays its id and pipeline, as the task list would show it).
    const read = subTaskReader(this.#bus);
    const nested = await withSubTasks(trace, async (id, pipeline) =>
      mayTouch(who, pipeline) ? read(id, pipeline) : undefined,
    );
    return wholeTrace(nested, (ref) => this.#values.read(ref));
  }

  /** Tasks newest first, filtered, a page at a time; a cursor is the last task of the page before. */
  async list(
    who: Principal,
    query: {
      pipeline?: string | undefined;
      status?: TaskListStatus | undefined;
      limit: number;
      cursor?: string | undefined;
    },
  ): Promise<TaskList> {
    const { pipeline, status, limit, cursor } = query;
    authorize(who, 'read', pipeline);
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const records = await readValues(await openWorkflowStore(this.#bus));
    const views = [...records.map(viewOf), ...(await this.#queuedViews(records))]
      .filter(
        (v) =>
          (!pipeline || v.pipeline === pipeline) &&
          (!status || hasStatus(v, status)) &&
          mayTouch(who, v.pipeline),
      )
      .map((v) => ({ ...v, createdAt: v.createdAt ?? '', taskId: v.taskId }))
      .sort(newestFirst)
      .filter((v) => after === undefined || newestFirst(v, after) > 0);
    const page = views.slice(0, limit);
    const last = page.at(-1);
    return {
      tasks: page,
      ...(views.length > limit && last ? { next: encodeCursor(last) } : {}),
    };
  }

  /**
   * Cancels a task: one still queued through its mark (the coordinator that claims it ends it as cancelled before any
   * step runs), one running through its coordinator.
   */
  async cancel(
    who: Principal,
    taskId: string,
    reason?: string,
  ): Promise<{ taskId: string; status: 'cancelled' }> {
    const found = this.#visible(who, 'submit', await this.#lookup(taskId));
    const why = reason ? `${reason} (token ${who.name})` : `cancelled by token ${who.name}`;
    const store = this.#queued;
    if (isQueued(found) && store) {
      const at = new Date().toISOString();
      if ((await cancelQueued(store, taskId, { reason: why, at })) === 'queued')
        return { taskId, status: 'cancelled' };
      // Claimed meanwhile: it has its record now, and a coordinator to stop it.
      this.#visible(who, 'submit', await readTask(this.#bus, taskId));
    }
    await cancelTask(this.#bus, taskId, why);
    return { taskId, status: 'cancelled' };
  }

  /**
   * Holds a running task: its coordinator records the pause before it answers, so it holds across a restart. Needs the
   * `approve` scope for the task's pipeline, as deciding its approvals does; recorded as paused by the token's name.
   */
  async pause(who: Principal, taskId: string, body: PauseBody = {}): Promise<PauseResult> {
    await this.#steerable(who, taskId, 'pause');
    await pauseTask(this.#bus, taskId, {
      ...(body.reason ? { reason: body.reason } : {}),
      by: steeredBy(who, body.by),
    });
    return { taskId, status: 'paused' };
  }

  /** Lets a paused task go on (`approve` scope, as {@link pause}). */
  async resume(who: Principal, taskId: string, body: ResumeBody = {}): Promise<ResumeResult> {
    await this.#steerable(who, taskId, 'resume');
    await resumeTask(this.#bus, taskId, { by: steeredBy(who, body.by) });
    return { taskId, status: 'running' };
  }

  /**
   * Tells the agent at work a person's message, recorded before the answer (`approve` scope, as {@link pause}). With
   * an idempotency key, a retry is answered with the first message's id and tells nothing new.
   */
  async tell(
    who: Principal,
    taskId: string,
    body: TellBody,
    options: { idempotencyKey?: string } = {},
  ): Promise<TellResult> {
    await this.#steerable(who, taskId, 'tell');
    // A key of the caller's even when it gave none, so that a tell whose answer was lost can name the one to send
    // again: the coordinator hears the key derived from it, which sent again would be derived again, and told twice.
    const idempotencyKey = options.idempotencyKey || randomUUID();
    const { messageId } = await tellTask(this.#bus, taskId, body.text, {
      by: steeredBy(who, body.by),
      key: tellKey(who, idempotencyKey),
      again: `tell it again with idempotency key ${idempotencyKey} and it is told once`,
      ...(this.#tellAnswerMs === undefined ? {} : { timeoutMs: this.#tellAnswerMs }),
    });
    return { taskId, messageId };
  }

  /**
   * Runs an ended (failed or cancelled) task again from step `from`, as a new task of its pipeline linked to it; the
   * steps before `from` are reused. Needs the `submit` scope for the task's pipeline. An idempotency key makes the new
   * task's id, so a retried request makes no second task.
   */
  async restart(
    who: Principal,
    taskId: string,
    body: RestartBody,
    options: { idempotencyKey?: string } = {},
  ): Promise<FamilyResult> {
    await this.#ended(who, taskId, 'restart');
    const made = await restartTask(this.#bus, taskId, {
      from: body.from,
      ...(body.newest ? { newest: true } : {}),
      by: steeredBy(who, body.by),
      ...this.#familyId(who, taskId, 'restart', options.idempotencyKey),
      submit: await this.#familySubmit(),
    });
    return { taskId: made.taskId, origin: { taskId, kind: 'restart', step: body.from } };
  }

  /**
   * Starts a new task from an ended one at step `at`, with its input or earlier steps' outputs edited (`submit`
   * scope, as {@link restart}).
   */
  async fork(
    who: Principal,
    taskId: string,
    body: ForkBody,
    options: { idempotencyKey?: string } = {},
  ): Promise<FamilyResult> {
    await this.#ended(who, taskId, 'fork');
    const made = await forkTask(this.#bus, taskId, {
      at: body.at,
      ...(body.input ? { input: body.input } : {}),
      ...(body.set ? { set: body.set } : {}),
      ...(body.newest ? { newest: true } : {}),
      by: steeredBy(who, body.by),
      ...this.#familyId(who, taskId, 'fork', options.idempotencyKey),
      submit: await this.#familySubmit(),
    });
    return { taskId: made.taskId, origin: { taskId, kind: 'fork', step: body.at } };
  }

  /** The record of a task a new one is made from, once the principal may submit to its pipeline. */
  async #ended(who: Principal, taskId: string, action: string): Promise<WorkflowRecord> {
    const found = this.#visible(who, 'submit', await this.#lookup(taskId));
    if (!isQueued(found)) return found;
    throw new OperationError(
      'conflict',
      `task ${taskId} is queued and has not run yet; nothing to ${action}`,
    );
  }

  /**
   * How a restart's or fork's new task is submitted: as a submit here is, marked queued, so it reads `submitted` and
   * can be cancelled before a coordinator claims it.
   */
  async #familySubmit(): Promise<FamilySubmitOptions> {
    const queued = await this.#queuedStore();
    return {
      values: this.#values,
      limits: this.#limits,
      ...(queued ? { queued: { store: queued, now: () => new Date().toISOString() } } : {}),
    };
  }

  /** The new task's id: from the idempotency key (one per token, original and operation), else a fresh one. */
  #familyId(who: Principal, taskId: string, action: string, key: string | undefined): { id: string } {
    return { id: key ? this.#ids.fromKey(who.name, `${action}\n${taskId}\n${key}`) : this.#ids.fresh() };
  }

  /**
   * The task's record, when the principal may steer its pipeline's tasks. A task still queued has no coordinator to
   * hold or tell it yet: that is said (503), rather than that it does not exist.
   */
  async #steerable(who: Principal, taskId: string, action: string): Promise<WorkflowRecord> {
    const found = this.#visible(who, 'approve', await this.#lookup(taskId));
    if (!isQueued(found)) return found;
    throw new OperationError(
      'unavailable',
      `task ${taskId} is queued: no coordinator has taken it yet, so none can ${action} it; try again once it runs`,
    );
  }

  /** What people are asked now (or ever, with `all`), of the pipelines the principal may see. */
  async approvals(who: Principal, filter: { all?: boolean; taskId?: string }): Promise<HumanRequest[]> {
    authorize(who, 'read');
    return (await listHumanRequests(this.#bus, filter)).filter((r) => mayTouch(who, r.pipeline));
  }

  /**
   * Decides an approval or answers a question, recorded as decided by the token's name (a `by` the caller gives is
   * kept beside it, never instead).
   */
  async decide(who: Principal, requestId: string, body: DecisionBody): Promise<DecisionResult> {
    authorize(who, 'approve');
    const request = await readHumanRequest(this.#bus, requestId);
    // One of a pipeline the token may not touch is answered as if there were none.
    if (!request || !mayTouch(who, request.pipeline)) {
      throw new OperationError('not_found', `no approval or question named ${requestId}`);
    }
    authorize(who, 'approve', request.pipeline);
    const by = body.by ? `${body.by} (token ${who.name})` : who.name;
    if ('decision' in body && body.decision === 'deny' && !body.reason) {
      throw new InvalidRequest('a deny needs a reason: the agent is told why');
    }
    const result = await replyToHuman(
      this.#bus,
      requestId,
      'decision' in body
        ? {
            kind: 'approval',
            decision: { decision: body.decision, ...(body.reason ? { reason: body.reason } : {}), by },
          }
        : { kind: 'question', answer: { answer: body.answer, by } },
    );
    return {
      id: requestId,
      taskId: result.request.taskId,
      agent: result.request.agent,
      outcome: result.status,
      by,
    };
  }

  /** The task's record, once the principal may read its pipeline. */
  async readable(who: Principal, taskId: string): Promise<WorkflowRecord> {
    return this.#visible(who, 'read', await readTask(this.#bus, taskId));
  }

  /**
   * The task's record, or its mark while it is queued (stored in `TASKS`, claimed by no coordinator yet), once the
   * principal may read its pipeline: what its events can be followed by from the moment it was submitted.
   */
  async followable(who: Principal, taskId: string): Promise<WorkflowRecord | QueuedTask> {
    return this.#visible(who, 'read', await this.#lookup(taskId));
  }

  /** The record, else the queued mark; `not_found` when there is neither. */
  async #lookup(taskId: string): Promise<WorkflowRecord | QueuedTask> {
    try {
      return await readTask(this.#bus, taskId);
    } catch (error) {
      if (!OperationError.is(error, 'not_found')) throw error;
      const store = await this.#queuedStore();
      // A mark that cannot be read is as good as none: the task is then unknown until it is claimed.
      const mark = store && (await readQueued(store, taskId).catch(() => undefined));
      if (mark) return mark;
      if (!store) throw error;
    }
    // Claimed between the two reads: the claim writes the record before it takes the mark.
    return readTask(this.#bus, taskId);
  }

  /**
   * KV `queued`; undefined while it cannot be opened (no coordinator that makes it has run, or this gateway's NATS user
   * may not use it): tasks are then submitted unmarked, as before marks were kept. Tried again after a while.
   */
  async #queuedStore() {
    if (this.#queued || Date.now() < this.#queuedRetryAt) return this.#queued;
    try {
      this.#queued = await openQueuedStore(this.#bus, QUEUED_WAIT);
    } catch (error) {
      this.#bus.logger.warn(
        { err: error },
        'cannot open the KV bucket queued: tasks are submitted unmarked, unknown to the gateway until a coordinator takes each',
      );
    }
    if (!this.#queued) this.#queuedRetryAt = Date.now() + QUEUED_RETRY_MS;
    return this.#queued;
  }

  /** The queued tasks (marks not taken, with no record yet), as views. */
  async #queuedViews(records: WorkflowRecord[]): Promise<TaskView[]> {
    const store = await this.#queuedStore();
    if (!store) return [];
    const recorded = new Set(records.map((r) => r.taskId));
    const marks = await readValues(store).catch(() => []);
    return marks.filter((m) => m.takenAt === undefined && !recorded.has(m.taskId)).map(queuedViewOf);
  }

  /**
   * The record, when the principal may act on its pipeline with `scope`. A task of a pipeline it may not touch is
   * answered as if there were none: a 404, not a 403 that would say it exists.
   */
  #visible<T extends { taskId: string; pipeline: string }>(
    who: Principal,
    scope: 'read' | 'submit' | 'approve',
    record: T,
  ): T {
    authorize(who, scope);
    if (!mayTouch(who, record.pipeline))
      throw new OperationError('not_found', `no task ${record.taskId} is known on this server`);
    authorize(who, scope, record.pipeline);
    return record;
  }

  /**
   * A task's view with its whole output: read back from the pipeline's object store when the final event holds
   * only a preview. One that cannot be read keeps the preview (which says where the whole is) and `outputRef`.
   */
  async #wholeView(record: WorkflowRecord): Promise<TaskView> {
    const view = viewOf(record);
    const ref = view.outputRef;
    if (!ref) return view;
    try {
      const { outputRef: _read, ...whole } = view;
      return { ...whole, output: await this.#values.read(ref) };
    } catch {
      return view;
    }
  }

  async #trace(record: WorkflowRecord): Promise<TaskTrace> {
    const trace = buildTaskTrace(
      record.taskId,
      await readTaskEvents(this.#bus, record.taskId, record.pipeline),
    );
    // The events do not name the version; the record does.
    return record.version === undefined ? trace : { ...trace, version: record.version };
  }
}

/** Who steered a task, as its events and record keep it: the token's name, with the `by` its caller gave beside it. */
const steeredBy = (who: Principal, by: string | undefined): string =>
  by ? `${by} (token ${who.name})` : who.name;

/** How long opening KV `queued` may wait for NATS; and how long after a failure it is tried again. */
const QUEUED_WAIT = { outageMs: 2_000, noJetStreamMs: 1_000 };
const QUEUED_RETRY_MS = 30_000;

type Ordered = Pick<WorkflowRecord, 'createdAt' | 'taskId'>;

/** Newest first, then by id: a total order, so a page ends at a definite place. */
const newestFirst = (a: Ordered, b: Ordered) =>
  b.createdAt.localeCompare(a.createdAt) || a.taskId.localeCompare(b.taskId);

const encodeCursor = (r: Ordered): string => encodePlace({ at: r.createdAt, taskId: r.taskId });

function decodeCursor(cursor: string): Ordered {
  const place = decodePlace(cursor);
  if (!place) throw new InvalidRequest('cursor: not one this gateway gave');
  return { createdAt: place.at, taskId: place.taskId };
}

/**
 * Waits for a task's final event on the live subject; subscribed before the task is submitted, so none is missed.
 * `stopping` ends the wait early, with no event.
 */
function finalEventOf(bus: JetStreamBus, taskId: string, pipeline: string, stopping: AbortSignal) {
  let resolve: (event: TroupeEvent | undefined) => void = () => {};
  const arrived = new Promise<TroupeEvent | undefined>((r) => (resolve = r));
  const subscription = bus.subscribe(
    // A final event is never batched: only its own subject can bring it.
    subjects.event(pipeline, taskId, 'task.*'),
    TroupeEvent,
    (delivery) => {
      // Only on its own subject: a final event on another's is forged.
      if (FINAL_EVENT_KINDS.includes(delivery.value.kind) && onItsSubject(delivery.value, delivery.subject))
        resolve(delivery.value);
    },
    { reporter: 'gateway:wait' },
  );
  return {
    within: async (ms: number): Promise<TroupeEvent | undefined> => {
      const end = () => resolve(undefined);
      const timer = setTimeout(end, ms);
      if (stopping.aborted) end();
      stopping.addEventListener('abort', end);
      try {
        return await arrived;
      } finally {
        clearTimeout(timer);
        stopping.removeEventListener('abort', end);
      }
    },
    stop: () => subscription.unsubscribe(),
  };
}

/**
 * The key a tell is sent with: the caller's, per token (two callers' equal keys are two tells), of a bounded length
 * whatever the caller's is. A plain hash, not the id secret's HMAC: a gateway without a secret makes a new one when it
 * restarts, and a tell retried through it then must still be known.
 */
function tellKey(who: Principal, key: string): string {
  return `g-${createHash('sha256').update(`${who.name}\n${key}`).digest('base64url').slice(0, 32)}`;
}
