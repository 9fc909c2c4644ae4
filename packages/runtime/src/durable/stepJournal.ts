import { createHash } from 'node:crypto';
import type { ChatMessage } from '@troupe/llm';
import {
  BUCKETS,
  type ConversationSummary,
  type EventOf,
  emptyUsage,
  JournalEntry,
  type ModelReply,
  sumUsage,
  type ToldMessage,
  type ToolResult,
  type ToolResultRecord,
  type UsageTotals,
  type ValueRef,
} from '@troupe/protocol';
import type { JetStreamBus } from '../transport/bus.ts';
import { type CallerCheckpoint, CheckpointNotStoredError } from './callerCheckpoint.ts';
import {
  type KeyValue,
  type KvEntry,
  type KvReads,
  KvStore,
  throughOutages,
  underPrefix,
} from './kvStore.ts';
import { isKnownRecord, JournalRecord, NewerJournalRecordError } from './newerJournalRecord.ts';

export { JournalEntry };

/** What numbers a `context.compacted` event's summary (see {@link StepJournal.compactionNumbering}). */
export type CompactionFacts = Pick<
  EventOf<'context.compacted'>['data'],
  'stepId' | 'index' | 'before' | 'after' | 'estimatedTokens'
>;

/** A step's call to a remote agent, as the journal keeps it. */
export type RemoteCallRecord = Extract<JournalEntry, { kind: 'remote.call' }>;

/**
 * What a turn's model key holds, read once and matched to the turn's conversation later: the messages people told the
 * task that an earlier run read just before this turn, and the model's reply, if one was recorded.
 */
export interface RecordedTurn {
  told?: ToldMessage[];
  /** The reply recorded for this turn, if it answered this very conversation. */
  reply(messages: readonly ChatMessage[]): ModelReply | undefined;
}

/** What the journal knows of a tool call before it runs. */
export type ToolCallRecord =
  | { state: 'new' }
  | { state: 'done'; result: ToolResultRecord }
  /** It started and never recorded a result (its process died), or another worker is running it now. */
  | { state: 'in_doubt'; startedAt?: string };

/**
 * A step's journal in the KV bucket `journal`, under its pipeline's name. Keys are deterministic — the step id (task, step, round), the
 * agent's turn in the step and the position of the call — so a step run again meets its own records:
 *
 * | key                                  | record                                      |
 * | ------------------------------------ | ------------------------------------------- |
 * | `<stepId>.<turn>.model`              | what was told before turn, then its reply   |
 * | `<stepId>.c<n>`                      | the n-th compaction's summary               |
 * | `<stepId>.<turn>.<index>`            | tool call: started, result                  |
 * | `<stepId>.<turn>.<index>.approval`   | the approval asked for it                   |
 * | `<stepId>.<turn>.<index>.question`   | the question it asked                       |
 * | `<stepId>.remote`                    | a call to a remote agent                    |
 * | `<stepId>.remote.<n>.question`       | its n-th question to a person               |
 *
 * Messages people told the task share their turn's model key: the turn's reply replaces them and keeps them, so a run
 * reads each turn's record once, told messages or not.
 *
 * A record of a kind this host does not know (a newer host wrote it) is never taken for nothing: reading it throws
 * {@link NewerJournalRecordError}, and the step stops rather than replay wrongly.
 */
export class StepJournal {
  readonly #store: KeyValue<JournalRecord>;
  readonly #large: LargeRecords | undefined;
  /** A local step's: its workflow's checkpoint, which every write waits for (see {@link forLocalStep}). */
  #caller: LocalStepGate | undefined;

  /**
   * A journal kept in `store`; {@link StepJournal.open} opens the `journal` bucket. With `large`, a record too large
   * for a KV value is kept there instead (see {@link forPipeline}).
   */
  constructor(store: KeyValue<JournalRecord>, large?: LargeRecords) {
    this.#store = store;
    this.#large = large;
  }

  /**
   * The journal of one step taken by a workflow in this process, whose checkpoint records the step's output: its
   * first write waits until that workflow has stored every checkpoint it made so far (the outputs of the steps this
   * one may be given among them), and a checkpoint that is not stored refuses it ({@link CheckpointNotStoredError}).
   * So the step's final model reply need not be journaled ({@link checkpointsFinalReply}): the next step's journal
   * waits for the checkpoint that records it.
   */
  forLocalStep(stepId: string, checkpoint: CallerCheckpoint): StepJournal {
    const journal = new StepJournal(this.#store, this.#large);
    journal.#caller = new LocalStepGate(stepId, checkpoint);
    return journal;
  }

  /** The step's workflow records its final model reply with its output (see {@link forLocalStep}). */
  get checkpointsFinalReply(): boolean {
    return this.#caller !== undefined;
  }

  /**
   * The whole `journal` bucket: {@link forPipeline} gives the part a pipeline's steps write. A reader of ended tasks'
   * records alone may read `anyReplica` ({@link KvReads}): by key, which its permissions may then keep to its pipelines.
   */
  static async open(bus: JetStreamBus, reads?: KvReads): Promise<StepJournal> {
    return new StepJournal(await KvStore.open(bus, BUCKETS.journal, JournalRecord, undefined, reads));
  }

  /**
   * The journal of one pipeline's tasks, kept under `<pipeline>.` so the broker can keep each pipeline's workers to
   * their own tasks' records. The keys below are within it. With `values` (the pipeline's object store), a record
   * over {@link MAX_RECORD_BYTES} is kept there whole and found again by its key; without it, such a write fails.
   */
  forPipeline(pipeline: string, values?: JournalValues): StepJournal {
    return new StepJournal(underPrefix(this.#store, pipeline), values && { values, pipeline });
  }

  static toolKey(stepId: string, turn: number, index: number): string {
    return `${stepId}.${turn}.${index}`;
  }

  static modelKey(stepId: string, turn: number): string {
    return `${stepId}.${turn}.model`;
  }

  static compactionKey(stepId: string, n: number): string {
    return `${stepId}.c${n}`;
  }

  /**
   * Numbers a run's `context.compacted` events, given in order, as {@link compactionKey} numbers their summaries: by
   * the event's `index`, or in events from before summaries were numbered, in the order they came in their step. An
   * event that repeats one already numbered (a resumed run publishes its summary again) is undefined. A recording
   * made from events and a replay of it number them so, and so keep and read the same records.
   */
  static compactionNumbering(): (compacted: CompactionFacts) => number | undefined {
    const seen = new Map<string, Set<string>>();
    return ({ stepId, index, before, after, estimatedTokens }) => {
      const step = seen.get(stepId) ?? new Set<string>();
      seen.set(stepId, step);
      const same = index === undefined ? `${before}:${after}:${estimatedTokens}` : `#${index}`;
      if (step.has(same)) return undefined;
      step.add(same);
      return index ?? step.size;
    };
  }

  /** Where the approval asked for a tool call (see {@link toolKey}), or the question it asked, is recorded. */
  static humanKey(toolKey: string, kind: 'approval' | 'question'): string {
    return `${toolKey}.${kind}`;
  }

  /** Where a step's call to a remote agent is recorded. */
  static remoteKey(stepId: string): string {
    return `${stepId}.remote`;
  }

  /** The call to a remote agent recorded under this key, if any. */
  async remoteCall(key: string): Promise<RemoteCallRecord | undefined> {
    const entry = (await this.#get(key))?.value;
    return entry?.kind === 'remote.call' ? entry : undefined;
  }

  /** The call to a remote agent recorded under this key, with its revision, for a write that must not replace another's. */
  async remoteCallAt(key: string): Promise<{ record: RemoteCallRecord; revision: number } | undefined> {
    const entry = await this.#get(key);
    return entry?.value.kind === 'remote.call'
      ? { record: entry.value, revision: entry.revision }
      : undefined;
  }

  /**
   * Records a step's call to a remote agent if no run of the step has yet, and gives its revision: undefined when one
   * has (two runs of a step may start together, a resend on another host beside a first delivery that came late), so
   * the caller goes on from what that run recorded rather than replacing it — a remote task id among it.
   */
  async createRemoteCall(
    key: string,
    record: Omit<RemoteCallRecord, 'kind' | 'recordedAt'>,
    now: Date,
  ): Promise<number | undefined> {
    return this.#create(key, { kind: 'remote.call', ...record, recordedAt: now.toISOString() });
  }

  /** Replaces the record at `revision` with this one, and gives the new revision: undefined when another run wrote since. */
  async updateRemoteCall(
    key: string,
    record: Omit<RemoteCallRecord, 'kind' | 'recordedAt'>,
    revision: number,
    now: Date,
  ): Promise<number | undefined> {
    const kept = await this.#kept(key, { kind: 'remote.call', ...record, recordedAt: now.toISOString() });
    return throughOutages(() => this.#store.update(key, kept, revision));
  }

  /** Records (or updates) a step's call to a remote agent. */
  async recordRemoteCall(key: string, record: Omit<RemoteCallRecord, 'kind' | 'recordedAt'>, now: Date) {
    await this.#put(key, { kind: 'remote.call', ...record, recordedAt: now.toISOString() });
  }

  /** What is recorded under a key, whatever it answered; `troupe replay` reads what events kept only in part. */
  async entry(key: string): Promise<JournalEntry | undefined> {
    return (await this.#get(key))?.value;
  }

  /** The reply recorded for this turn, if it answered this very conversation. */
  async modelReply(key: string, messages: readonly ChatMessage[]): Promise<ModelReply | undefined> {
    return (await this.recordedTurn(key)).reply(messages);
  }

  /**
   * Reads what is recorded for a turn now, to be matched to its conversation later: a step reads its first turn's
   * record while it starts, before its conversation is ready to be asked.
   */
  async recordedTurn(key: string): Promise<RecordedTurn> {
    return turnOf((await this.#get(key))?.value);
  }

  /**
   * Records the messages people told the task that the agent reads just before this turn, before its model is
   * asked with `conversation` and them, and returns those that stand: these, the ones another run of the step
   * recorded for the turn first (a run thought dead), so both put the same messages at the same turn, or none when a
   * reply to `conversation` as it is stands there already (that run was told nothing at this turn).
   */
  async recordTold(
    key: string,
    messages: readonly ToldMessage[],
    conversation: readonly ChatMessage[],
    now: Date,
  ): Promise<ToldMessage[]> {
    const entry: JournalEntry = { kind: 'told', messages: [...messages], recordedAt: now.toISOString() };
    if ((await this.#create(key, entry)) !== undefined) return entry.messages;
    for (let attempt = 0; attempt < TURN_ATTEMPTS; attempt++) {
      const found = await this.#get(key);
      if (found === undefined) {
        if ((await this.#create(key, entry)) !== undefined) return entry.messages;
        continue;
      }
      const first = turnOf(found.value);
      if (first.told) return first.told;
      if (first.reply(conversation)) return [];
      // What is there answered another conversation (the step changed since): these messages take the turn, unless
      // another run's took it meanwhile, which then stand for both.
      if ((await this.#update(key, entry, found.revision)) !== undefined) return entry.messages;
    }
    throw new Error(`cannot record what was told before turn ${key}: the record kept changing`);
  }

  /**
   * Records a model's reply to this turn (with `told`, the messages read just before it, which the record keeps
   * in place of their own) and returns the reply that stands: this one, or — when another run
   * of the step (one that was thought dead) recorded its reply to the same conversation first — that one, so
   * both runs go on from the same reply and make the same tool calls, which the claims then keep single.
   */
  async recordModelReply(
    key: string,
    messages: readonly ChatMessage[],
    reply: ModelReply,
    now: Date,
    told?: readonly ToldMessage[],
  ): Promise<ModelReply> {
    const { content, toolCalls, usage, costUsd, finishReason, provider, model, durationMs } = reply;
    const entry: JournalEntry = {
      kind: 'model.reply',
      conversation: digest(messages),
      reply: { content, toolCalls, usage, costUsd, finishReason, provider, model, durationMs },
      ...(told && told.length > 0 ? { told: [...told] } : {}),
      recordedAt: now.toISOString(),
    };
    if ((await this.#create(key, entry)) !== undefined) return reply;
    for (let attempt = 0; attempt < TURN_ATTEMPTS; attempt++) {
      const found = await this.#get(key);
      const recorded = turnOf(found?.value);
      const first = recorded.reply(messages);
      if (first) return { ...first, journaled: true };
      // Messages another run read before this turn that this reply did not (this run had not heard them, or could
      // not read the record): the reply goes on unrecorded, as one the journal could not take, and the turn keeps
      // those messages for any later run.
      if (recorded.told && !sameIds(recorded.told, told ?? [])) return reply;
      if (found?.value.kind !== 'told') break;
      // What was told before this turn: one reply replaces it, compared and set, so two runs that read it (one
      // thought dead) go on from the same reply, as they do at a turn told nothing.
      if ((await this.#update(key, entry, found.revision)) !== undefined) return reply;
    }
    // What is there answered another conversation (the step changed): this reply replaces it.
    await this.#put(key, entry);
    return reply;
  }

  async compaction(key: string, messages: readonly ChatMessage[]): Promise<ConversationSummary | undefined> {
    const entry = (await this.#get(key))?.value;
    if (entry?.kind !== 'compaction' || entry.conversation !== digest(messages)) return undefined;
    const { kind: _kind, conversation: _conversation, recordedAt: _recordedAt, ...summary } = entry;
    return summary;
  }

  async recordCompaction(
    key: string,
    messages: readonly ChatMessage[],
    result: ConversationSummary,
    now: Date,
  ): Promise<void> {
    const { journaled: _journaled, ...summary } = result;
    await this.#put(key, {
      kind: 'compaction',
      conversation: digest(messages),
      ...summary,
      recordedAt: now.toISOString(),
    });
  }

  /**
   * Claims a tool call before it runs, for the run of the step `run` (an id of this attempt). `new`: the caller
   * holds the claim and runs the call. `done`: it ran; here is its result. `in_doubt`: another run claimed it
   * and recorded no result — it died mid-call, or runs it now — so running it again could repeat its effect. A
   * record for a different tool or arguments (the step changed), or one that cannot be read, counts as new.
   *
   * `expectNew`: the caller made the reply that asked for the call (it did not replay it), so the key is almost
   * surely free: the claim is written first, one round trip, and what is there read only when it is taken. Else
   * what is there is read first, one round trip for a call that ran before (a failed create costs three).
   */
  async claimToolCall(
    key: string,
    tool: string,
    args: string,
    run: string,
    now: Date,
    { expectNew = false }: { expectNew?: boolean } = {},
  ): Promise<ToolCallRecord> {
    const started: JournalEntry = {
      kind: 'tool.started',
      tool,
      arguments: args,
      run,
      startedAt: now.toISOString(),
    };
    if (expectNew && (await this.#create(key, started)) !== undefined) return { state: 'new' };
    for (let attempt = 0; attempt < 3; attempt++) {
      const existing = (await this.#get(key))?.value;
      if (existing === undefined) {
        if ((await this.#create(key, started)) !== undefined) return { state: 'new' };
        // Someone wrote the key meanwhile (or it holds what cannot be read): look again.
        continue;
      }
      const same =
        (existing.kind === 'tool.result' || existing.kind === 'tool.started') &&
        existing.tool === tool &&
        existing.arguments === args;
      if (!same) break;
      if (existing.kind === 'tool.result') return { state: 'done', result: existing.result };
      return existing.run === run ? { state: 'new' } : { state: 'in_doubt', startedAt: existing.startedAt };
    }
    await this.#put(key, started);
    return { state: 'new' };
  }

  async recordToolResult(key: string, args: string, result: ToolResult, now: Date): Promise<void> {
    const { ok, output, error, decision, truncated, outputRef } = result;
    await this.#put(key, {
      kind: 'tool.result',
      tool: result.tool,
      arguments: args,
      result: {
        ok,
        output,
        decision,
        ...(error ? { error } : {}),
        ...(truncated ? { truncated } : {}),
        ...(outputRef ? { outputRef } : {}),
      },
      recordedAt: now.toISOString(),
    });
  }

  /** The id of the approval or question asked before under this key. */
  async humanRequest(key: string): Promise<string | undefined> {
    const entry = (await this.#get(key))?.value;
    return entry?.kind === 'human' ? entry.requestId : undefined;
  }

  async recordHumanRequest(key: string, requestId: string, now: Date): Promise<void> {
    await this.#put(key, { kind: 'human', requestId, recordedAt: now.toISOString() });
    // A key starts with its step's id, which starts with the task id (which has no dot).
    await this.#listRequest(key.slice(0, key.indexOf('.')), requestId);
  }

  /** Adds a request to its task's list (`<taskId>.people`), over concurrent writers (steps run in parallel). */
  async #listRequest(taskId: string, requestId: string): Promise<void> {
    const key = StepJournal.peopleKey(taskId);
    for (let attempt = 0; attempt < LIST_ATTEMPTS; attempt++) {
      const current = await this.#get(key);
      const listed = current?.value.kind === 'people' ? current.value.requestIds : [];
      if (listed.includes(requestId)) return;
      const entry: JournalEntry = { kind: 'people', requestIds: [...listed, requestId] };
      const written = await throughOutages(() =>
        current ? this.#store.update(key, entry, current.revision) : this.#store.create(key, entry),
      );
      if (written !== undefined) return;
    }
    throw new Error(`cannot list request ${requestId} of task ${taskId}: the list kept changing`);
  }

  /** Where a task's requests to people are listed. */
  static peopleKey(taskId: string): string {
    return `${taskId}.people`;
  }

  /**
   * What earlier runs of a step spent on the model, as their recorded replies and summaries say: the usage a
   * step reports when it ends before replaying them (its task ran out of time while nothing ran).
   */
  async spent(stepId: string): Promise<UsageTotals> {
    let total = emptyUsage();
    const keys = await throughOutages(() => this.#store.keys(`${stepId}.>`));
    for (const key of keys.filter((k) => k.endsWith('.model') || /\.c\d+$/.test(k))) {
      const entry = await this.#get(key).then(
        (found) => found?.value,
        // What a newer host recorded is not counted: a sum, which replays nothing.
        (error: unknown) => {
          if (NewerJournalRecordError.is(error)) return undefined;
          throw error;
        },
      );
      const spent =
        entry?.kind === 'model.reply' ? entry.reply : entry?.kind === 'compaction' ? entry : undefined;
      if (spent === undefined) continue;
      total = sumUsage(total, { ...spent.usage, costUsd: spent.costUsd, modelCalls: 1 });
    }
    return total;
  }

  /**
   * The ids of every approval and question the steps of a task asked, from its list: one read, however large the
   * journal (listing the task's keys instead made nats-server scan the whole journal stream at every task's end).
   */
  async humanRequestsOf(taskId: string): Promise<string[]> {
    const entry = (await this.#get(StepJournal.peopleKey(taskId)))?.value;
    return entry?.kind === 'people' ? entry.requestIds : [];
  }

  // A nats-server restart takes a few seconds; reads and writes of the journal wait it out.
  async #get(key: string): Promise<KvEntry<JournalEntry> | undefined> {
    const entry = await throughOutages(() => this.#store.get(key));
    if (entry === undefined) return undefined;
    const found = entry.value;
    if (!isKnownRecord(found)) throw new NewerJournalRecordError(key, found.kind);
    if (found.kind !== 'stored') return { ...entry, value: found };
    const { ref } = found;
    if (!this.#large)
      throw new Error(`journal record ${key} is kept in ${ref.bucket}, which this reader cannot read`);
    const stored = JournalRecord.parse(JSON.parse(await this.#large.values.read(ref)));
    if (!isKnownRecord(stored)) throw new NewerJournalRecordError(key, stored.kind);
    return { ...entry, value: stored };
  }

  async #put(key: string, entry: JournalEntry) {
    const kept = await this.#kept(key, entry);
    return throughOutages(() => this.#store.put(key, kept));
  }

  async #update(key: string, entry: JournalEntry, revision: number) {
    const kept = await this.#kept(key, entry);
    return throughOutages(() => this.#store.update(key, kept, revision));
  }

  async #create(key: string, entry: JournalEntry) {
    const kept = await this.#kept(key, entry);
    return throughOutages(() => this.#store.create(key, kept));
  }

  /**
   * The record as the KV bucket can hold it: itself, or a reference to it in the object store. Every write makes it
   * first: a local step's waits here for its workflow's checkpoint (see {@link forLocalStep}).
   */
  async #kept(key: string, entry: JournalEntry): Promise<JournalEntry> {
    await this.#caller?.passed();
    const json = JSON.stringify(entry);
    if (!this.#large || Buffer.byteLength(json, 'utf8') <= MAX_RECORD_BYTES) return entry;
    // Named by its content too: a record replaced under its key never overwrites the object an older read names.
    const name = `journal.${key}.${createHash('sha256').update(json).digest('hex').slice(0, 16)}`;
    return { kind: 'stored', ref: await this.#large.values.store(this.#large.pipeline, name, json) };
  }
}

/**
 * What a local step's journal writes wait for: its workflow's checkpoint, asked for at the first write (by then the
 * workflow has made the checkpoint that records the outputs the step was given) and passed once; a checkpoint not
 * stored refuses this write and every later one.
 */
class LocalStepGate {
  readonly #stepId: string;
  #checkpoint: CallerCheckpoint | undefined;
  #stored: Promise<boolean> | undefined;
  #passed = false;

  constructor(stepId: string, checkpoint: CallerCheckpoint) {
    this.#stepId = stepId;
    this.#checkpoint = checkpoint;
  }

  async passed(): Promise<void> {
    if (this.#passed) return;
    const checkpoint = this.#checkpoint;
    this.#stored ??= checkpoint ? checkpoint.stored() : Promise.resolve(false);
    this.#checkpoint = undefined;
    if (!(await this.#stored)) throw new CheckpointNotStoredError(this.#stepId);
    this.#passed = true;
  }
}

/** Whether two lists of told messages are the same messages in the same order. */
function sameIds(a: readonly ToldMessage[], b: readonly ToldMessage[]): boolean {
  return a.length === b.length && a.every((message, i) => message.id === b[i]?.id);
}

/** What a turn's model key holds, as {@link StepJournal.recordedTurn} gives it. */
function turnOf(entry: JournalEntry | undefined): RecordedTurn {
  if (entry?.kind === 'told') return { told: entry.messages, reply: () => undefined };
  if (entry?.kind !== 'model.reply') return { reply: () => undefined };
  const reply = (messages: readonly ChatMessage[]) =>
    entry.conversation === digest(messages) ? entry.reply : undefined;
  return entry.told ? { told: entry.told, reply } : { reply };
}

/** Records above this many bytes of JSON go to the object store: a KV value is one NATS message (1 MiB at most). */
export const MAX_RECORD_BYTES = 256 * 1024;

/** Where a pipeline's journal keeps records too large for a KV value: its object store (`ValueStore`). */
export interface JournalValues {
  store(pipeline: string, name: string, text: string): Promise<ValueRef>;
  read(ref: ValueRef): Promise<string>;
}

interface LargeRecords {
  values: JournalValues;
  pipeline: string;
}

/** Writers racing on a task's list of requests to people: each retry has seen a newer list. */
const LIST_ATTEMPTS = 20;

/** Runs of one step racing on a turn's model key: few write it, and each retry has seen a newer record. */
const TURN_ATTEMPTS = 5;

/** Identifies a conversation: a recorded reply is replayed only to the conversation it answered. */
function digest(messages: readonly ChatMessage[]): string {
  return createHash('sha256').update(JSON.stringify(messages)).digest('base64url');
}
