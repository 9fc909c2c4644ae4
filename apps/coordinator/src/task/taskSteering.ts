import { MAX_TOLD_KEYS, type ToldMessage, type WorkflowRecord } from '@troupe/protocol';
import { FORWARD_KEY_PREFIX } from '../workflow/subTaskSteering.ts';

/**
 * The most told messages a task keeps unread, and their most text in all (UTF-8 bytes): they ride in its record and
 * in every step request, so a flood of them must not make either too large to store or send.
 */
export const MAX_UNREAD_TOLD = 100;
export const MAX_UNREAD_TOLD_BYTES = 256 * 1024;

/** A pause in force: since when (ms on the task's clock), by whom and why. */
export interface PauseMark {
  since: number;
  by?: string;
  reason?: string;
}

/** What a task's steering adds to each record its checkpoints write. */
export type SteeringFields = Pick<
  WorkflowRecord,
  'paused' | 'pausedMs' | 'told' | 'toldCount' | 'toldKeys' | 'toldOwed'
>;

/** Told when the task is held or let go: a held step call waits for `false`, a sub-task is paused with its parent. */
export type HoldListener = (held: boolean) => void;

/** A hold listener that is an object with a method (a step's send, which a parked task keeps): no closure of its own. */
export interface HoldWatcher {
  holdChanged(held: boolean): void;
}

/** Told each message once its record is written: a `pipeline` step forwards it to its sub-task. */
export type ToldListener = (message: ToldMessage) => void;

/**
 * What people have done to a task while it runs (`troupe pause`, `resume`, `tell`), as one run of it here holds it:
 * whether it is held, how long it was held before, and the told messages no finished step has read. Its step calls
 * read it through the run context (`runContext.ts`): a held task sends no step, and each step it sends carries the
 * unread messages. The checkpoint writer puts {@link TaskSteering.fields} into every record it writes, so a restart
 * goes on from what was recorded (see docs/durability.md, "Pause, resume and tell").
 */
export class TaskSteering {
  #paused: PauseMark | undefined;
  /** A resume not recorded yet: the task stays held until it is (`letGo`), and is paused again if it cannot be. */
  #resuming: (PauseMark & { heldMs: number }) | undefined;
  #pausedMs: number;
  #told: ToldMessage[];
  #toldCount: number;
  /*
   * Each collection below is made when it first has something to hold: most tasks are never steered, and a parked
   * task keeps its steering while its model call lasts (a Map or a Set costs about 150 bytes empty). The listeners
   * are arrays replaced on each change, each its exact size, so a change while they are told reaches only the next.
   */
  /** The keys of the latest tells, oldest first, each with its message's id: a retried tell is taken once. */
  #toldKeys: Map<string, string> | undefined;
  #listeners: readonly (HoldListener | HoldWatcher)[] = NONE;
  /**
   * The steps at work in this run (by step id, each with its live parts: a send, a wait, a hold; a `pipeline` step by
   * its sub-task's id), and, of each message told, the steps at work then (or given it since) that have not read it
   * yet. A message one step read stays in `told` for those, and goes to no other step. The messages read and what
   * they are still owed ride in the record (`toldOwed`), so a restored run goes on with the same bookkeeping.
   */
  #atWork: readonly AtWork[] = NONE;
  #owed: Map<string, Set<string>> | undefined;
  #readOnce: Set<string> | undefined;
  #toldListeners: readonly ToldListener[] = NONE;
  /** Messages told here whose record is not written yet: none goes out of the task (to a sub-task) before it is. */
  #unrecorded: Set<string> | undefined;

  /** A run's steering, from the record it resumes (nothing held, nothing told for a new task). */
  constructor(record?: Partial<SteeringFields>) {
    const paused = record?.paused;
    this.#paused =
      paused === undefined
        ? undefined
        : {
            since: Date.parse(paused.since),
            ...(paused.by === undefined ? {} : { by: paused.by }),
            ...(paused.reason === undefined ? {} : { reason: paused.reason }),
          };
    this.#pausedMs = record?.pausedMs ?? 0;
    this.#told = record?.told ? [...record.told] : [];
    this.#toldCount = record?.toldCount ?? this.#told.length;
    const keys = record?.toldKeys ?? [];
    if (keys.length > 0) this.#toldKeys = new Map(keys.map(({ key, messageId }) => [key, messageId]));
    for (const { messageId, steps } of record?.toldOwed ?? []) {
      if (!this.#told.some((m) => m.id === messageId)) continue;
      this.#readOnce ??= new Set();
      this.#readOnce.add(messageId);
      this.#owed ??= new Map();
      this.#owed.set(messageId, new Set(steps.map(runOf)));
    }
  }

  /**
   * A restored run's workflow has started, its steps at work again: a step the record said still owes a message and
   * that did not come back (its branch was left meanwhile, say) owes it no more. After XState's start, in which each
   * restored step's call says it is at work.
   */
  restored(): void {
    queueMicrotask(() => {
      for (const owed of this.#owed?.values() ?? [])
        for (const stepId of owed) if (this.#atWorkAs(stepId) === undefined) owed.delete(stepId);
      this.#prune();
    });
  }

  /** The id of the message a tell with `key` made, if the task still keeps that key. */
  toldWith(key: string): string | undefined {
    return this.#toldKeys?.get(key);
  }

  /** The pause in force, if the task is held. */
  get paused(): PauseMark | undefined {
    return this.#paused;
  }

  /** Whether steps are held: the task is paused, or its resume is not recorded yet. */
  get held(): boolean {
    return this.#paused !== undefined || this.#resuming !== undefined;
  }

  /** How long the task was held in all, over the pauses that ended: its deadline comes that much later. */
  get pausedMs(): number {
    return this.#pausedMs;
  }

  /** The told messages no finished step has read yet, oldest first. */
  get told(): readonly ToldMessage[] {
    return this.#told;
  }

  /**
   * What step `stepId` is sent: the messages nobody has read, and those read that it was at work for and has not. A
   * step given a message owes it a reading from then on, as one at work when it was told does.
   */
  toldFor(step: string): ToldMessage[] {
    const stepId = runOf(step);
    const given = this.#told.filter(
      (m) => this.#readOnce?.has(m.id) !== true || this.#owed?.get(m.id)?.has(stepId) === true,
    );
    for (const { id } of given) {
      this.#owed ??= new Map();
      const owed = this.#owed.get(id);
      if (owed) owed.add(stepId);
      else this.#owed.set(id, new Set([stepId]));
    }
    return given;
  }

  /**
   * A part of step `stepId`'s call is live (its send, its wait to send again, its hold): the step is at work. Returns
   * how to say the part ended; the step stops being at work once no part of it is live (after XState's transition, in
   * which one part replaces another).
   */
  atWork(step: string): () => void {
    this.beginWork(step);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.endWork(step);
    };
  }

  /**
   * {@link TaskSteering.atWork} for a part that keeps no closure (a step's send, which a parked task keeps): it says
   * its end once, with {@link TaskSteering.endWork}.
   */
  beginWork(step: string): void {
    const stepId = runOf(step);
    const atWork = this.#atWorkAs(stepId);
    if (atWork) atWork.parts += 1;
    else this.#atWork = [...this.#atWork, { stepId, parts: 1 }];
  }

  /** A part begun with {@link TaskSteering.beginWork} ended; each says so once. */
  endWork(step: string): void {
    const stepId = runOf(step);
    const ending = this.#atWorkAs(stepId);
    if (ending === undefined) return;
    ending.parts -= 1;
    // After the transitions its end sets off, which settle in the microtasks after it: a failed call's retry
    // begins its wait (at work again) only once the call's failure has reached the workflow.
    setImmediate(() => {
      const atWork = this.#atWorkAs(stepId);
      if (atWork !== undefined && atWork.parts > 0) return;
      if (atWork !== undefined) this.#atWork = this.#atWork.filter((other) => other !== atWork);
      for (const owed of this.#owed?.values() ?? []) owed.delete(stepId);
      this.#prune();
    });
  }

  #atWorkAs(stepId: string): AtWork | undefined {
    return this.#atWork.find((atWork) => atWork.stepId === stepId);
  }

  /** Holds the task from `now`; false when it is held already. Listeners hear it at once. */
  pause(now: number, by?: string, reason?: string): boolean {
    if (this.#paused !== undefined) return false;
    this.#paused = {
      since: now,
      ...(by === undefined ? {} : { by }),
      ...(reason === undefined ? {} : { reason }),
    };
    this.#tellListeners(true);
    return true;
  }

  /**
   * Lets the task go at `now`: the pause that ended (with how long it lasted), or undefined when it was not held.
   * Listeners hear it only on {@link TaskSteering.letGo}, once the resume is recorded.
   */
  resume(now: number): (PauseMark & { heldMs: number }) | undefined {
    const paused = this.#paused;
    if (paused === undefined) return undefined;
    const heldMs = Math.max(0, now - paused.since);
    this.#paused = undefined;
    this.#pausedMs += heldMs;
    this.#resuming = { ...paused, heldMs };
    return this.#resuming;
  }

  /**
   * Takes back a resume that could not be recorded: the task is paused as before (its held steps were never let go),
   * unless it was paused again meanwhile, whose record holds the resume.
   */
  undoResume(): void {
    const resuming = this.#resuming;
    this.#resuming = undefined;
    if (resuming === undefined || this.#paused !== undefined) return;
    const { heldMs, ...paused } = resuming;
    this.#paused = paused;
    this.#pausedMs -= heldMs;
  }

  /**
   * Makes the pause in force `by`'s (a person pausing a sub-task its parent holds: the parent's resume then lets go
   * of no pause of theirs), since when it began; the mark it replaced, to put back when this cannot be recorded.
   */
  retakePause(by: string | undefined, reason: string | undefined): PauseMark | undefined {
    const before = this.#paused;
    if (before === undefined) return undefined;
    this.#paused = {
      since: before.since,
      ...(by === undefined ? {} : { by }),
      ...(reason === undefined ? {} : { reason }),
    };
    return before;
  }

  /** Puts back the pause {@link TaskSteering.retakePause} replaced. */
  restorePause(mark: PauseMark): void {
    if (this.#paused !== undefined) this.#paused = mark;
  }

  /** Takes back a pause that could not be recorded: as if it never was, its held steps let go. */
  undoPause(): void {
    if (this.#paused === undefined) return;
    this.#paused = undefined;
    this.#tellListeners(false);
  }

  /** Tells the listeners the task is no longer held (the resume is recorded): held steps are sent again. */
  letGo(): void {
    this.#resuming = undefined;
    if (this.#paused === undefined) this.#tellListeners(false);
  }

  /** Why a message of `text` cannot be taken now (too many, or too much, unread already), or undefined when it can. */
  refusal(text: string): string | undefined {
    const unread = this.#told.length;
    if (unread >= MAX_UNREAD_TOLD)
      return `it has ${unread} told messages no step has read yet, the most it keeps`;
    const bytes = this.#told.reduce((sum, m) => sum + Buffer.byteLength(m.text), Buffer.byteLength(text));
    if (bytes > MAX_UNREAD_TOLD_BYTES)
      return `its unread told messages and this one would be ${Math.ceil(bytes / 1024)} KiB, over the ${MAX_UNREAD_TOLD_BYTES / 1024} KiB it keeps`;
    return undefined;
  }

  /**
   * Takes a person's message: it gets the task's next id and waits in the unread list until a step reads it. Its
   * `key`, if any, is kept with the id (the newest {@link MAX_TOLD_KEYS} are, and as many of the keys its parent
   * forwarded with), so a tell again with it is known.
   */
  tell(text: string, at: string, by?: string, key?: string): ToldMessage {
    this.#toldCount += 1;
    const message: ToldMessage = {
      id: `m-${this.#toldCount}`,
      text,
      at,
      ...(by === undefined ? {} : { by }),
    };
    this.#told.push(message);
    this.#unrecorded ??= new Set();
    this.#unrecorded.add(message.id);
    if (key !== undefined) {
      this.#toldKeys ??= new Map();
      this.#toldKeys.set(key, message.id);
      // The newest MAX_TOLD_KEYS of people's keys, and apart from them of those its parent forwarded with: those
      // are no more than the parent's unread backlog (all kept until the sub-task ends), and one dropped would be
      // told twice when a restored parent forwards it again, however many tells people sent meanwhile.
      const forwarded = key.startsWith(FORWARD_KEY_PREFIX);
      const alike = [...this.#toldKeys.keys()].filter((k) => k.startsWith(FORWARD_KEY_PREFIX) === forwarded);
      for (const oldest of alike.slice(0, Math.max(0, alike.length - MAX_TOLD_KEYS)))
        this.#toldKeys.delete(oldest);
    }
    if (this.#atWork.length > 0) {
      this.#owed ??= new Map();
      this.#owed.set(message.id, new Set(this.#atWork.map(({ stepId }) => stepId)));
    }
    return message;
  }

  /**
   * Step `stepId` read these messages (no step: a message taken back, its key with it): later steps are not given
   * them again, and they are dropped once every other step at work when they were told has read them or ended.
   */
  read(ids: readonly string[], stepId?: string): void {
    if (ids.length === 0) return;
    for (const id of ids) {
      if (stepId === undefined) this.#unrecorded?.delete(id);
      if (!this.#told.some((m) => m.id === id)) continue;
      if (stepId === undefined) {
        this.#owed?.delete(id);
        const keys = this.#toldKeys;
        for (const [key, messageId] of keys ?? []) if (messageId === id) keys?.delete(key);
      } else this.#owed?.get(id)?.delete(runOf(stepId));
      this.#readOnce ??= new Set();
      this.#readOnce.add(id);
    }
    this.#prune();
  }

  /** Drops the messages read that no step at work still owes a reading. */
  #prune(): void {
    const readOnce = this.#readOnce;
    if (readOnce === undefined || this.#told.length === 0) return;
    this.#told = this.#told.filter((message) => {
      if (!readOnce.has(message.id) || (this.#owed?.get(message.id)?.size ?? 0) > 0) return true;
      this.#owed?.delete(message.id);
      readOnce.delete(message.id);
      return false;
    });
  }

  /** Hears each message told from now on, once its record is written, until the returned function is called. */
  onTold(listener: ToldListener): () => void {
    this.#toldListeners = [...this.#toldListeners, listener];
    return () => {
      this.#toldListeners = without(this.#toldListeners, listener);
    };
  }

  /** Whether message `id`'s record is written (a message restored from the record is). */
  isRecorded(id: string): boolean {
    return this.#unrecorded?.has(id) !== true;
  }

  /** Message `message` is recorded: those hearing tells hear it now. */
  recorded(message: ToldMessage): void {
    this.#unrecorded?.delete(message.id);
    if (!this.#told.some((m) => m.id === message.id)) return;
    for (const listener of this.#toldListeners) listener(message);
  }

  /** Hears each hold and each letting go until the returned function is called. */
  listen(listener: HoldListener | HoldWatcher): () => void {
    this.#listeners = [...this.#listeners, listener];
    return () => this.unlisten(listener);
  }

  /** Stops `listener` hearing holds, as the function {@link TaskSteering.listen} returned does. */
  unlisten(listener: HoldListener | HoldWatcher): void {
    this.#listeners = without(this.#listeners, listener);
  }

  /** What the task's records say of its steering now. */
  fields(): SteeringFields {
    const paused = this.#paused;
    return {
      ...(paused === undefined
        ? {}
        : {
            paused: {
              since: new Date(paused.since).toISOString(),
              ...(paused.by === undefined ? {} : { by: paused.by }),
              ...(paused.reason === undefined ? {} : { reason: paused.reason }),
            },
          }),
      ...(this.#pausedMs > 0 ? { pausedMs: this.#pausedMs } : {}),
      ...(this.#told.length > 0 ? { told: [...this.#told] } : {}),
      ...(this.#toldCount > 0 ? { toldCount: this.#toldCount } : {}),
      ...(this.#toldKeys !== undefined && this.#toldKeys.size > 0
        ? { toldKeys: [...this.#toldKeys].map(([key, messageId]) => ({ key, messageId })) }
        : {}),
      ...this.#owedFields(),
    };
  }

  /** The messages some step read that others still owe a reading, with those steps, for the record. */
  #owedFields(): Pick<SteeringFields, 'toldOwed'> {
    const toldOwed = this.#told.flatMap(({ id }) => {
      const steps = this.#owed?.get(id);
      return this.#readOnce?.has(id) === true && steps !== undefined && steps.size > 0
        ? [{ messageId: id, steps: [...steps] }]
        : [];
    });
    return toldOwed.length > 0 ? { toldOwed } : {};
  }

  #tellListeners(held: boolean): void {
    for (const listener of this.#listeners)
      if (typeof listener === 'function') listener(held);
      else listener.holdChanged(held);
  }
}

const NONE: readonly never[] = [];

/** A step at work, with how many of its parts are live (see {@link TaskSteering.atWork}). */
interface AtWork {
  readonly stepId: string;
  parts: number;
}

/** `listeners` less `listener` (its first entry, as a Set's delete would take the one there is), a new array. */
function without<T>(listeners: readonly T[], listener: T): readonly T[] {
  const at = listeners.indexOf(listener);
  if (at < 0) return listeners;
  return listeners.length === 1 ? NONE : [...listeners.slice(0, at), ...listeners.slice(at + 1)];
}

/**
 * The run of a step a workflow's `retry` runs again (`<step id>-r<n>`, a foreach item's `.i<index>` after it), by its
 * first run's id: a retry owes the messages its failed run was owed (a failed run's reads do not count), and the
 * workflow's wait before it keeps the step at work.
 */
function runOf(stepId: string): string {
  return stepId.replace(/-r\d+(?=(\.i\d+)?$)/, '');
}
