import {
  BUCKETS,
  type CaseRecording,
  EvalCase,
  type EventOf,
  errorMessage,
  FINAL_EVENT_KINDS,
  fillInput,
  type JournalEntry,
  type TroupeEvent,
  type ValueRef,
  type WorkflowRecord,
} from '@troupe/protocol';
import {
  type JetStreamBus,
  mapLimit,
  NewerJournalRecordError,
  permissionRefusal,
  StepJournal,
  ValueStore,
} from '@troupe/runtime/bus';
import { readTaskEvents } from './taskOperations.ts';
import { readValues, workflowStoreIfAny } from './troupeState.ts';

/** Which recorded tasks to make cases of. */
export interface RecordedSelect {
  /** The pipeline whose tasks are taken; with `taskIds`, each task's own when absent. */
  pipeline?: string;
  /** Only tasks that ended so; any ended task when absent (a running task is never taken). */
  status?: 'completed' | 'failed' | 'cancelled';
  /** Only tasks created at or after this time. */
  since?: Date;
  /** These tasks, in this order, whatever their status or age (the other filters are for listings). */
  taskIds?: readonly string[];
  /** At most this many tasks, the newest first. */
  limit?: number;
}

/** A task that gave no case, and why, for the caller to print. */
export interface SkippedTask {
  taskId: string;
  why: string;
}

export interface RecordedCases {
  cases: EvalCase[];
  skipped: SkippedTask[];
}

/** Tasks read at once: each is a few reads of the server, so a far one still answers fifty in seconds. */
const PARALLEL_TASKS = 4;

/**
 * Cases made from recorded tasks: the tasks KV `workflows` knows (by pipeline, status, age and count, newest first)
 * or the ones named, each with its recording kept whole so it replays after the server forgets it — its events, the
 * journal records that hold whole what an event kept only the start of ({@link journalKeysOf}), and every stored
 * value its events point to (outputs and tool results too large for an event, a task's input cut for its message).
 * A case's goal, input and metadata are its task's; a completed task's whole output is its `expected`. A task whose
 * events are no longer kept, that has not ended, or whose stored values are gone is skipped, with why.
 *
 * @example
 * const { cases, skipped } = await recordedCases(bus, { pipeline: 'support', status: 'completed', limit: 50 });
 */
export async function recordedCases(bus: JetStreamBus, select: RecordedSelect): Promise<RecordedCases> {
  const store = await workflowStoreIfAny(bus);
  // Named tasks: their records alone, not every task the server remembers.
  const records = store
    ? await readValues(store, select.taskIds ? [...new Set(select.taskIds)] : undefined)
    : [];
  const tasks = tasksToRecord(records, select);
  const reader = new TaskReader(bus);
  const results = await mapLimit(
    tasks,
    PARALLEL_TASKS,
    async (task): Promise<EvalCase | SkippedTask> =>
      'why' in task
        ? task
        : reader.caseOf(task).catch((error: unknown) => ({
            taskId: task.taskId,
            why: `cannot read it: ${errorMessage(error)}`,
          })),
  );
  const cases: EvalCase[] = [];
  const skipped: SkippedTask[] = [];
  for (const result of results) {
    if ('why' in result) skipped.push(result);
    else cases.push(result);
  }
  return { cases, skipped };
}

/** A task to read: its id, the pipeline its events are under, and its record when KV `workflows` has one. */
export type Chosen = { taskId: string; pipeline: string; record?: WorkflowRecord } | SkippedTask;

/**
 * The tasks to make cases of, from their records in KV `workflows`: those named (each skipped, with why, when it
 * runs still or ran on another pipeline), or those the filters choose, newest first, up to the limit.
 */
export function tasksToRecord(records: readonly WorkflowRecord[], select: RecordedSelect): Chosen[] {
  return select.taskIds ? named(records, select) : chosen(records, select);
}

/** The tasks the filters choose, newest first, up to the limit. */
function chosen(records: readonly WorkflowRecord[], select: RecordedSelect): Chosen[] {
  const since = select.since?.toISOString();
  return records
    .filter(
      (r) =>
        (select.pipeline === undefined || r.pipeline === select.pipeline) &&
        r.status !== 'running' &&
        (select.status === undefined || r.status === select.status) &&
        (since === undefined || Date.parse(r.createdAt) >= Date.parse(since)),
    )
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt))
    .slice(0, select.limit ?? Number.POSITIVE_INFINITY)
    .map((record) => ({ taskId: record.taskId, pipeline: record.pipeline, record }));
}

/** The tasks named, each under its record's pipeline (or the one selected, for a task KV `workflows` forgot). */
function named(records: readonly WorkflowRecord[], select: RecordedSelect): Chosen[] {
  const byId = new Map(records.map((r) => [r.taskId, r]));
  return [...new Set(select.taskIds)].map((taskId): Chosen => {
    const record = byId.get(taskId);
    if (record && select.pipeline !== undefined && record.pipeline !== select.pipeline)
      return { taskId, why: `it ran on pipeline ${record.pipeline}, not ${select.pipeline}` };
    if (record?.status === 'running') return { taskId, why: 'it is still running' };
    const pipeline = record?.pipeline ?? select.pipeline;
    if (pipeline === undefined) return { taskId, why: 'no task of this id is known on this server' };
    return record ? { taskId, pipeline, record } : { taskId, pipeline };
  });
}

/** Reads tasks' events, journal records and stored values from the server, making each a case. */
class TaskReader {
  readonly #bus: JetStreamBus;
  readonly #values: ValueStore;
  #journal: Promise<StepJournal> | undefined;

  constructor(bus: JetStreamBus) {
    this.#bus = bus;
    this.#values = new ValueStore(bus);
  }

  async caseOf(task: {
    taskId: string;
    pipeline: string;
    record?: WorkflowRecord;
  }): Promise<EvalCase | SkippedTask> {
    const { taskId, pipeline } = task;
    const skip = (why: string): SkippedTask => ({ taskId, why });
    const events = (await readTaskEvents(this.#bus, taskId, pipeline)).filter((e) => e.taskId === taskId);
    if (events.length === 0) return skip('no events of it are kept on this server (EVENTS let them age out)');
    const accepted = events.find((e): e is EventOf<'task.accepted'> => e.kind === 'task.accepted');
    if (!accepted) return skip('its task.accepted event is no longer kept on this server');
    const final = events.find((e) => FINAL_EVENT_KINDS.includes(e.kind));
    if (!final) return skip('it has not ended: its events hold no final event');
    const journal = await this.#journalRecords(events[0]?.pipeline ?? pipeline, events);
    const values: Record<string, string> = {};
    for (const ref of refsOf(events)) {
      const key = `${ref.bucket}/${ref.name}`;
      if (key in values) continue;
      try {
        values[key] = await this.#values.read(ref);
      } catch (error) {
        return skip(`a value its events point to is no longer stored: ${errorMessage(error)}`);
      }
    }
    const { goal, input, inputCut, metadata } = accepted.data;
    const storedInput = inputCut && values[`${inputCut.ref.bucket}/${inputCut.ref.name}`];
    const wholeInput = inputCut && storedInput ? fillInput(input, inputCut, storedInput) : input;
    const expected = expectedOf(final, values);
    const recording: CaseRecording = {
      taskId,
      pipeline,
      ...(task.record?.version === undefined ? {} : { version: task.record.version }),
      events,
      journal,
      values,
    };
    return EvalCase.parse({
      id: taskId,
      goal,
      ...(wholeInput === undefined ? {} : { input: wholeInput }),
      ...(metadata === undefined ? {} : { metadata }),
      ...(expected === undefined ? {} : { expected }),
      recording,
    });
  }

  /**
   * The journal records a replay of these events reads: under {@link journalKeysOf}'s keys, those the journal has
   * (a record of a kind only a newer host knows is left out, as a replay leaves it). Read by direct gets that any
   * replica may answer: the task has ended, so its records no longer change, and a direct get names its key in its
   * subject, where the broker's permissions keep an evaluator to its pipelines' records at every replica count.
   */
  async #journalRecords(
    pipeline: string,
    events: readonly TroupeEvent[],
  ): Promise<Record<string, JournalEntry>> {
    const keys = journalKeysOf(events);
    if (keys.length === 0) return {};
    this.#journal ??= StepJournal.open(this.#bus, { anyReplica: true });
    const journal = (await this.#journal).forPipeline(pipeline, this.#values);
    const read: Record<string, JournalEntry> = {};
    await Promise.all(
      keys.map(async (key) => {
        const entry = await journal.entry(key).catch((error: unknown) => {
          if (NewerJournalRecordError.is(error)) return undefined;
          throw journalRefusal(error);
        });
        if (entry) read[key] = entry;
      }),
    );
    return Object.fromEntries(keys.flatMap((key) => (read[key] ? [[key, read[key]]] : [])));
  }
}

/**
 * A refusal of a journal read that could not name its key (a bucket whose stream allows no direct get, made on a
 * nats-server before 2.9), said plainly: a user kept to some pipelines' records may read them only by key.
 */
function journalRefusal(error: unknown): unknown {
  const refusal = permissionRefusal(error);
  if (!refusal?.message.includes(`STREAM.MSG.GET.KV_${BUCKETS.journal}`)) return error;
  return new Error(
    `the ${BUCKETS.journal} bucket allows no direct gets, and this NATS user may read only some pipelines' journal records, by key (${refusal.message}): make the bucket again on nats-server 2.9 or later, or use a user that reads the whole journal (the gateway's)`,
    { cause: error },
  );
}

/**
 * The old cases with the new ones added, each new case replacing an old one of its id in its place: a dataset's next
 * version as `troupe eval dataset add` and the gateway's `POST /v1/evals/datasets/{name}/cases` make it.
 */
export function mergeCases(
  old: readonly EvalCase[],
  added: readonly EvalCase[],
): { cases: EvalCase[]; added: number; replaced: number } {
  const byId = new Map(old.map((c) => [c.id, c]));
  let replaced = 0;
  const fresh = new Set<string>();
  for (const c of added) {
    if (byId.has(c.id) && !fresh.has(c.id)) replaced += 1;
    fresh.add(c.id);
    byId.set(c.id, c);
  }
  return { cases: [...byId.values()], added: fresh.size - replaced, replaced };
}

/** Every stored value the events point to: whole outputs and tool results, and a task's input cut for its message. */
function refsOf(events: readonly TroupeEvent[]): ValueRef[] {
  const refs: ValueRef[] = [];
  for (const event of events) {
    if (event.kind === 'tool.result' || event.kind === 'step.completed' || event.kind === 'task.completed') {
      if (event.data.outputRef) refs.push(event.data.outputRef);
    }
    if (event.kind === 'task.accepted' && event.data.inputCut) refs.push(event.data.inputCut.ref);
  }
  return refs;
}

/** A completed task's whole output: its event's, or the stored value its event kept only the start of. */
function expectedOf(final: TroupeEvent, values: Readonly<Record<string, string>>): string | undefined {
  if (final.kind !== 'task.completed') return undefined;
  const ref = final.data.outputRef;
  return ref ? (values[`${ref.bucket}/${ref.name}`] ?? final.data.output) : final.data.output;
}

/** How an event's text was shortened for the wire (the runtime's `preview`): its whole is in the journal. */
const TRUNCATED = /…\[\d+ more characters\]$/;

/**
 * The step journal's keys (`StepJournal.modelKey` and `compactionKey`, within the pipeline's part) whose records
 * make whole what these events kept only in part: a model reply whose text or a call's arguments were shortened
 * (of each step's turn the reply a replay takes: the first, or a later one not replayed from the journal; the arguments from the turn's `tool.call` events) and
 * a conversation summary that was (numbered by `StepJournal.compactionNumbering`, as a replay numbers them). The events alone say which, so a recording is made whole without replaying it; in the order they came.
 */
export function journalKeysOf(events: readonly TroupeEvent[]): string[] {
  const keys = new Set<string>();
  const calls = new Map<string, EventOf<'tool.call'>[]>();
  for (const event of events) {
    if (event.kind !== 'tool.call') continue;
    const key = `${event.data.stepId}#${event.data.turn ?? 0}`;
    calls.set(key, [...(calls.get(key) ?? []), event]);
  }
  const replied = new Set<string>();
  const compaction = StepJournal.compactionNumbering();
  for (const event of events) {
    if (event.kind === 'context.compacted') {
      const n = compaction(event.data);
      if (n !== undefined && TRUNCATED.test(event.data.summary))
        keys.add(StepJournal.compactionKey(event.data.stepId, n));
    }
    if (event.kind !== 'llm.response') continue;
    const d = event.data;
    const turn = `${d.stepId}#${d.turn}`;
    // A resumed run's replays of a reply (from the journal) are the same reply: the first stands. A turn asked again
    // after a crash (a local step's final reply is in no journal) may be answered otherwise: the later stands.
    if (replied.has(turn) && d.journaled) continue;
    replied.add(turn);
    const key = StepJournal.modelKey(d.stepId, d.turn);
    keys.delete(key);
    const made = calls.get(turn) ?? [];
    const args = d.toolCalls.map(
      (_, index) => made.find((m) => (m.data.index ?? index) === index)?.data.arguments ?? '{}',
    );
    if (TRUNCATED.test(d.content) || args.some((a) => TRUNCATED.test(a))) keys.add(key);
  }
  return [...keys];
}
