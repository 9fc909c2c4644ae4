import {
  emptyUsage,
  MAX_TIMER_MS,
  type StepActivity,
  type TroupeEvent,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type CallerCheckpoint, isOutage } from '@troupe/runtime';
import { type ClaimedTask, startedFrom } from '../intake/claim.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import { type Ledger, noteActivity, type PendingWrite, takeCheckpoint } from './checkpoint.ts';
import { fencedWrite } from './taskRecord.ts';
import type { TaskServices } from './taskServices.ts';
import { isoNow } from './taskServices.ts';
import type { TaskSteering } from './taskSteering.ts';
import type { WorkflowSnapshot } from './workflowChild.ts';

/**
 * How long the checkpoint that records a local step's output may wait for the next write, by default, while only steps
 * of this process follow (see `CheckpointWriter.#hold`): as long as a step's events wait for their batch.
 */
export const DEFAULT_CHECKPOINT_LINGER_MS = 20;

/**
 * A runner's checkpoint linger, as its `checkpointLingerMs` option sets it ({@link DEFAULT_CHECKPOINT_LINGER_MS} when
 * not given; 0 writes every checkpoint, each at once: none held back, none left for a newer one). One that is no
 * number of milliseconds a timer can hold is refused, the runner not started.
 */
export function checkpointLingerOf(lingerMs: number | undefined): number {
  const linger = lingerMs ?? DEFAULT_CHECKPOINT_LINGER_MS;
  if (Number.isFinite(linger) && linger >= 0 && linger <= MAX_TIMER_MS) return linger;
  throw new Error(
    `checkpointLingerMs must be 0 (every checkpoint written at once) or a number of milliseconds above 0, at most ${MAX_TIMER_MS}, not ${linger}`,
  );
}

/** What the writer tells its task actor: only what the task must act on while its workflow runs. */
export type CheckpointWriterEvent =
  /** A write found another coordinator's lease on the record. */
  | { type: 'lease.lost' }
  /** A checkpoint could not be made or stored: the task fails. */
  | { type: 'checkpoint.poisoned'; error: unknown }
  /** A fault of ours while hearing the workflow (the delivery threw, say): the task actor fails with it. */
  | { type: 'writer.failed'; error: unknown };

/** What the record says of the workflow's time here once every write is done, for recording its ending. */
export interface Written {
  revision: number;
  progress: number;
  /** Another coordinator took the task over meanwhile: nothing more was written. */
  lost: boolean;
  /** The record with the final status and event is stored. */
  finalWritten: boolean;
  final: TroupeEvent | undefined;
  /** The workflow's totals as last seen, for an ending it did not record itself. */
  totals: { usage: WorkflowRecord['usage']; round: number };
}

/**
 * What a passivated task keeps for its writer, which lets go of it while the task sleeps: the record it last made, and
 * whether that is the first checkpoint, left unwritten until a later write (see `#unwritten`).
 */
export interface LastMade {
  record?: WorkflowRecord;
  unwritten?: boolean;
}

type WriterServices = Pick<TaskServices, 'clock' | 'store' | 'logger' | 'bus'> &
  Partial<Pick<TaskServices, 'passivation' | 'checkpointLingerMs'>> &
  Parameters<typeof takeCheckpoint>[0];

/**
 * A task's checkpoint writer, one per run of its workflow here: it hears each of the workflow's snapshots and each
 * activity report directly (no event through the task actor for either), makes the record of each, and writes the
 * records one at a time, in order, each fenced by the lease (the revision it last wrote). It tells the task actor
 * only what it must act on: the lease lost, or a checkpoint that cannot be made or stored. Once the workflow has
 * ended, {@link CheckpointWriter.written} resolves when every write is done, with what the ending is recorded from.
 *
 * It is also the checkpoint of the task's steps taken in this process ({@link CallerCheckpoint}): a step's output
 * whose final model reply no journal records is durable once {@link stored} says so, and no later step writes
 * anything durable before then (see `StepJournal.forLocalStep`).
 */
export class CheckpointWriter implements CallerCheckpoint {
  #ledger: Ledger;
  #queue: PendingWrite[] = [];
  #writing = false;
  /** The task actor no longer takes events from the writer (the workflow has ended, or the run is over). */
  #closed = false;
  #drained: (() => void) | undefined;
  /** Whether the task's steps only wait, as its last checkpoint or activity said (a held task is parked anyway). */
  #waiting = false;
  /** Since when, on the clock, the steps only wait: what passivation goes by (see `passivation.ts`). */
  #waitingSince: number | undefined;
  /** The workflow was restored from a passivated task's snapshot: its first snapshot is that one, on record already. */
  #restored = false;
  #tellTo: (event: CheckpointWriterEvent) => void;
  /** Steering changes made before the first checkpoint: answered once that checkpoint, which holds them, is written. */
  #steeredEarly: ((written: boolean) => void)[] = [];
  /**
   * The first checkpoint of a new task, not written since the claim's record says all it does but the snapshot; kept
   * until a later write holds the snapshot, for an ending from outside (a stop) to write before the hand-back, so
   * the next run restores the step in flight rather than enter it again.
   */
  #unwritten: PendingWrite | undefined;
  /** Writes queued so far, and of them the last one stored: each record holds the workflow as it was when made. */
  #made = 0;
  #stored = 0;
  /** Of the writes taken from the queue, the last one; it is being written while `#writing`. */
  #taken = 0;
  /**
   * Those waiting for every write made before they asked to be stored (see {@link stored}); `upTo` is unset while the
   * write they wait for is an owed output's, not queued yet.
   */
  #storedWaits: { upTo?: number; done: (stored: boolean) => void }[] = [];
  /** The write that holds a step's output owed to the record (see {@link owe}): the workflow's snapshot after it. */
  #owedBy = 0;
  /** A step's output is owed, and the workflow's snapshot that holds it not queued yet (see {@link owe}). */
  #owing = false;
  /** A record could not be stored for a reason other than an outage: the task fails, and nothing is written again. */
  #poisoned = false;
  /**
   * The checkpoint that holds an owed output, held back while only steps of this process follow (see {@link #hold}),
   * and the timer that writes it once it has lingered.
   */
  #held: { write: PendingWrite; timer: unknown } | undefined;
  /** How long a checkpoint may be held back; 0 holds none back and leaves none for a newer one (see {@link #hold}). */
  readonly #lingerMs: number;

  constructor(
    private readonly services: WriterServices,
    claimed: ClaimedTask,
    flow: FlowVersion,
    tell: (event: CheckpointWriterEvent) => void,
    private readonly onCheckpoint: (
      snapshot: WorkflowSnapshot,
      taken: { parked: boolean; resumed: boolean },
    ) => void,
    private readonly steering?: TaskSteering,
  ) {
    this.#tellTo = tell;
    this.#lingerMs = checkpointLingerOf(services.checkpointLingerMs);
    this.#ledger = {
      claimed,
      flow,
      revision: claimed.lease.revision,
      progress: claimed.lease.delivery.progress,
      firstCheckpoint: true,
      finalWritten: false,
      lost: false,
      ...(steering ? { steering } : {}),
    };
  }

  /**
   * Resolves true once every record made so far is stored (or a later one, which holds all it held); false when it is
   * not and will not be: the record was taken over by another coordinator, or the run here is over. A write that NATS
   * kept out for good (its retries spent) is made again while someone waits here: a step must not go on past it.
   */
  stored(): Promise<boolean> {
    if (this.#ledger.lost) return Promise.resolve(false);
    // Someone needs it stored: a checkpoint held back goes now.
    if (this.#held) this.#enqueue(this.#held.write);
    // An output owed and not yet made into a record (its step's reply is being heard): its record is waited for too,
    // numbered once the workflow's snapshot that holds it is queued.
    if (this.#owing) {
      if (this.#closed) return Promise.resolve(false);
      return new Promise<boolean>((done) => this.#storedWaits.push({ done }));
    }
    const upTo = Math.max(this.#made, this.#owedBy);
    if (this.#stored >= upTo) return Promise.resolve(true);
    // An output whose held checkpoint was thrown away as the run here ended: no write will hold it.
    if (upTo > this.#made && this.#closed) return Promise.resolve(false);
    const stored = new Promise<boolean>((done) => this.#storedWaits.push({ upTo, done }));
    if (!this.#writing && this.#queue.length === 0 && upTo <= this.#made) this.#writeAgain();
    return stored;
  }

  /**
   * A step taken in this process replied with an output no journal may record (its final model reply, see
   * `StepJournal.forLocalStep`), which the record of the workflow's next snapshot holds: until that is stored,
   * {@link owes} says so, for what would send a later step elsewhere, ask a person or start a sub-task to wait for
   * {@link stored} first. Told right before the workflow hears the reply (and so before the step after it is
   * started, which XState does before the writer hears the workflow's snapshot): for a reply that came while its task
   * slept, once the woken task's call hears it, after the steering and activity kept meanwhile (see `stepCallSend.ts`).
   * So one output at most is owed and unheard at a time, and the workflow's next snapshot is the one that holds it.
   */
  owe(): void {
    this.#owing = true;
  }

  /**
   * Whether a step's output is owed to the record still (see {@link owe}): so too once the record is lost or the run
   * here is over, when {@link stored} answers that it will not be stored and what asked goes no further.
   */
  get owes(): boolean {
    return this.#owing || this.#held !== undefined || this.#stored < this.#owedBy;
  }

  /**
   * The latest record again, after its write was kept out by NATS for good: a step waits for it (see {@link stored}).
   * None once the record is lost, the run here is over, or a record could not be stored for another reason (the task
   * fails with it).
   */
  #writeAgain(): void {
    const record = this.#ledger.latest;
    if (record === undefined || this.#closed || this.#ledger.lost || this.#poisoned) this.#settleStored(true);
    // Only for a write made already: one waiting for an owed output's snapshot waits for the workflow.
    else if (this.#storedWaits.some((wait) => wait.upTo !== undefined))
      this.#enqueue({ record, of: 'checkpoint' });
  }

  /** Tells those waiting for writes up to the last one stored; with `failed`, every other one too, as not stored. */
  #settleStored(failed: boolean): void {
    const waits = this.#storedWaits;
    this.#storedWaits = [];
    for (const wait of waits) {
      if (wait.upTo !== undefined && wait.upTo <= this.#stored) wait.done(true);
      else if (failed) wait.done(false);
      else this.#storedWaits.push(wait);
    }
  }

  /** A snapshot of the workflow: its checkpoint is queued, unless it has none to make. */
  snapshot(snapshot: WorkflowSnapshot): void {
    if (this.#restored) {
      this.#restored = false;
      return;
    }
    if (!this.#closed) this.#faultsTold(() => this.#checkpoint(snapshot));
  }

  /**
   * Since when the task's steps have only waited (on a person or a model), with nothing of it left to write; undefined
   * while they work, or a write is pending. What the runner passivates a task by.
   */
  get idleSince(): number | undefined {
    const pending =
      this.#writing || this.#queue.length > 0 || this.#steeredEarly.length > 0 || this.#held !== undefined;
    return pending ? undefined : this.waitingSince;
  }

  /** Since when the task's steps have only waited, writes pending or not; undefined while they work or it has ended. */
  get waitingSince(): number | undefined {
    return this.#closed || this.#ledger.lost ? undefined : this.#waitingSince;
  }

  /**
   * The task's actor tree was stopped while it waited and is restored now (see `passivation.ts`): the writer's events
   * go to the new task actor, and the restored workflow's first snapshot, the one taken as it was stopped, makes no
   * checkpoint (what it holds is what the writer last wrote, or is about to write as it would have).
   */
  reattach(tell: (event: CheckpointWriterEvent) => void): void {
    this.#tellTo = tell;
    this.#restored = true;
  }

  /** The record it last made, and whether it is left unwritten: what a passivated task keeps for it. */
  get lastMade(): LastMade {
    const record = this.#ledger.latest;
    return { ...(record ? { record } : {}), ...(this.#unwritten ? { unwritten: true } : {}) };
  }

  /**
   * The task's actor tree is stopped for its passivation: the writer keeps no reference to it (nothing is told), and
   * lets go of the record it last made (idle, it writes nothing meanwhile): the sleeping task keeps {@link lastMade}.
   */
  detach(): void {
    this.#tellTo = tellNobody;
    const { latest: _latest, ...ledger } = this.#ledger;
    this.#ledger = ledger;
    this.#unwritten = undefined;
  }

  /** The passivated task wakes: the record it last made, given back before its tree is restored. */
  awaken({ record, unwritten }: LastMade): void {
    if (record === undefined) return;
    this.#ledger = { ...this.#ledger, latest: record };
    if (unwritten) this.#unwritten = { record, of: 'checkpoint' };
  }

  /** What the current step is doing: parks the task while it waits on a person or a model, and records it. */
  activity(activity: StepActivity): void {
    if (!this.#closed) this.#faultsTold(() => this.#noteActivity(activity));
  }

  /**
   * People paused, resumed or told the task: its record is written with its steering as it is now (the steering's
   * own change made already), and the task parks while it is held. Resolves with whether that record was written:
   * a pause or a tell is answered only once it is recorded.
   */
  steered(): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    this.#park();
    const latest = this.#ledger.latest;
    return new Promise((done) => {
      // The task has ended: nobody holds it, and nothing is told to it any more.
      if (latest !== undefined && latest.status !== 'running') return done(false);
      // No checkpoint made yet: the first one holds the steering, and answers this once written.
      if (latest === undefined || this.#ledger.lost) {
        if (this.#ledger.lost) done(false);
        else this.#steeredEarly.push(done);
        return;
      }
      const record = { ...this.#steeringNow(latest), updatedAt: isoNow(this.services.clock) };
      this.#ledger = { ...this.#ledger, latest: record };
      this.#enqueue({ record, of: 'steering', done });
    });
  }

  /** The record's steering fields as the task's steering says now, those it no longer has removed. */
  #steeringNow(latest: WorkflowRecord): WorkflowRecord {
    const { paused: _p, pausedMs: _m, told: _t, toldCount: _c, toldKeys: _k, toldOwed: _o, ...rest } = latest;
    return { ...rest, ...this.steering?.fields() };
  }

  /** The workflow has ended the task (its final record is made) or the run here is over: nothing more is steered. */
  get ending(): boolean {
    return this.#closed || (this.#ledger.latest?.status ?? 'running') !== 'running';
  }

  /** Parks the task while it only waits or is held; it takes a working slot again otherwise. */
  #park(): void {
    this.#ledger.claimed.delivery.park(this.#waiting || this.steering?.paused !== undefined);
  }

  #checkpoint(snapshot: WorkflowSnapshot): void {
    const taken = takeCheckpoint(this.services, this.#ledger, snapshot);
    // A checkpoint that cannot be made fails this task (logged as it ends); it never reaches the process.
    if (taken.kind === 'poisoned') this.#tell({ type: 'checkpoint.poisoned', error: taken.error });
    if (taken.kind !== 'queued') return;
    if (this.#ledger.firstCheckpoint) startedFrom(this.#ledger.claimed);
    this.#ledger = taken.ledger;
    this.#wait(taken.parked);
    const parked = taken.parked || this.steering?.paused !== undefined;
    this.onCheckpoint(snapshot, { ...taken, parked });
    const early = this.#steeredEarly;
    this.#steeredEarly = [];
    // The record as claimed says it all but the snapshot, which a run from that record makes again the same: the
    // write is saved, unless a pause or a tell made before it waits to be recorded.
    if (taken.needless && early.length === 0 && !this.#owing) {
      this.#unwritten = taken.write;
      return;
    }
    if (this.#owing && early.length === 0 && !parked && this.#hold(taken.write)) {
      // The output is in the record held back now; one owed from here on is another step's.
      this.#owing = false;
      return;
    }
    this.#enqueue(
      early.length === 0
        ? taken.write
        : {
            ...taken.write,
            done: (written) => {
              for (const done of early) done(written);
            },
          },
    );
    if (this.#owing) this.#owedNow();
  }

  /**
   * Holds back the checkpoint that records a local step's output (one whose final model reply no journal holds, see
   * {@link owe}) while the workflow runs on here: true when it is held. Nothing durable can follow it unwritten (a
   * local step's journal, a step sent over NATS, a question to a person or a sub-task wait for {@link stored}, which
   * writes it at once), so it is written with the next write of any kind (every record holds it from here on), when
   * someone waits for it, when the workflow ends, or once it has waited the linger
   * ({@link DEFAULT_CHECKPOINT_LINGER_MS}). A run of local steps that ends within the linger writes one record where
   * it wrote one a step: a crash meanwhile resumes the task from the checkpoint before, and asks those steps' models
   * for their final replies again, as for one step's (durability.md, "A local step's final reply"). Not held: the
   * task's final record, a parked one, or one someone already waits for.
   */
  #hold(write: PendingWrite): boolean {
    const held = this.#held;
    if (this.#lingerMs === 0 || write.record.status !== 'running' || this.#storedWaits.length > 0)
      return false;
    this.#unwritten = undefined;
    // A later checkpoint holds all an earlier one did; the linger runs from the first output held.
    if (held) held.write = write;
    else {
      const timer = this.services.clock.setTimeout(
        () => this.#faultsTold(() => this.#held && this.#enqueue(this.#held.write)),
        this.#lingerMs,
      );
      this.#held = { write, timer };
    }
    return true;
  }

  /**
   * Throws away the checkpoint held back, never to be written (the record is lost, or the run here is over): the
   * output it holds stays owed, and {@link stored} says it will not be stored.
   */
  #discardHeld(): void {
    if (this.#release()) this.#owedBy = this.#made + 1;
  }

  /** Lets go of the checkpoint held back, if any: true when there was one. */
  #release(): boolean {
    const held = this.#held;
    if (held === undefined) return false;
    this.services.clock.clearTimeout(held.timer);
    this.#held = undefined;
    return true;
  }

  /** The snapshot that holds the owed output is queued: its write is the one the output waits for. */
  #owedNow(): void {
    this.#owing = false;
    this.#owedBy = this.#made;
    for (const wait of this.#storedWaits) wait.upTo ??= this.#made;
  }

  #noteActivity(activity: StepActivity): void {
    // Waiting on a person or a slow model, the task does no work: its working slot goes to another task meanwhile.
    this.#wait(activity.kind === 'person' || activity.kind === 'model');
    this.#park();
    const noted = noteActivity(this.services, this.#ledger, activity);
    if (noted === undefined) return;
    this.#ledger = noted.ledger;
    this.#enqueue(noted.write);
  }

  /**
   * Every write done, once the workflow has ended: what its ending is recorded from. From here on the task actor
   * hears nothing more from the writer: a failure of the last writes shows in `finalWritten`.
   */
  written(): Promise<Written> {
    this.#closed = true;
    // Ended from outside (a stop, a migration) with a checkpoint held back: it goes on record for the next run.
    if (this.#held) {
      if (this.#ledger.lost) this.#discardHeld();
      else this.#enqueue(this.#held.write);
    }
    // Let go before its first step replied (a stop, a migration): the snapshot goes on record for the next run.
    if (this.#unwritten && !this.#ledger.lost) this.#enqueue(this.#unwritten);
    // Nothing more of the workflow is heard: an output still owed will not be recorded here.
    if (!this.#writing) this.#settleStored(true);
    const done = () => {
      const { revision, progress, lost, finalWritten, final, latest } = this.#ledger;
      // The last record made has the workflow's totals as last seen (none before its first checkpoint).
      const totals = latest
        ? { usage: latest.usage, round: latest.round }
        : { usage: emptyUsage(), round: 1 };
      return { revision, progress, lost, finalWritten, final, totals };
    };
    if (!this.#writing) return Promise.resolve(done());
    return new Promise((resolve) => {
      this.#drained = () => resolve(done());
    });
  }

  /** The run is over: nothing more is written, and nothing more reaches the task actor. */
  close(): void {
    this.#closed = true;
    this.#drop();
  }

  /** Drops the writes not made yet, telling those waiting on one that it was not written. */
  #drop(): void {
    this.#discardHeld();
    const queued = this.#queue.splice(0);
    // Numbered as made, never written: the writes made after them keep their numbers.
    this.#taken += queued.length;
    const dropped = [...queued, ...this.#steeredEarly.splice(0).map((done) => ({ done }))];
    for (const write of dropped) write.done?.(false);
    if (!this.#writing) this.#settleStored(true);
  }

  /** Runs what the workflow or a step asks of the writer: a fault of ours there fails the task actor, not the asker. */
  #faultsTold(hear: () => void): void {
    try {
      hear();
    } catch (error) {
      this.#tell({ type: 'writer.failed', error });
      // The task actor fails with it: nothing more of this run is written.
      this.close();
    }
  }

  #tell(event: CheckpointWriterEvent): void {
    if (!this.#closed) this.#tellTo(event);
  }

  #wait(waiting: boolean): void {
    if (waiting && !this.#waiting) {
      this.#waitingSince = this.services.clock.now();
      this.services.passivation?.waiting(this);
    }
    if (!waiting) this.#waitingSince = undefined;
    this.#waiting = waiting;
  }

  #enqueue(write: PendingWrite): void {
    // Every write after the first checkpoint holds the workflow's snapshot, or a later one.
    this.#unwritten = undefined;
    // Every record is made from the latest: one held back is held by this write, which the output it owes waits for,
    // and whose failure is a checkpoint's.
    const held = this.#release();
    this.#made += 1;
    this.#queue.push(held ? { ...write, of: 'checkpoint' } : write);
    if (held) this.#owedBy = this.#made;
    if (this.#writing) return;
    this.#writing = true;
    // Written once the workflow is through with what it is doing now, not from inside it: a snapshot that holds a
    // foreach item just started comes before the item's first events, which the workflow says right after it, and
    // which must be sent before the record that holds the item (see `fencedWrite`).
    queueMicrotask(() => void this.#writeAll());
  }

  /**
   * Writes the queue out, one record at a time and in order: of the writes queued meanwhile, only the newest record
   * (see {@link #takeQueued}). A write's failure is an event, never a rejection.
   */
  async #writeAll(): Promise<void> {
    const { logger } = this.services;
    const taskId = this.#ledger.claimed.input.taskId;
    const token = this.#ledger.claimed.lease.token;
    for (let next = this.#takeQueued(); next !== undefined; next = this.#takeQueued()) {
      const number = this.#taken;
      if (this.#ledger.lost) {
        next.done?.(false);
        break;
      }
      try {
        const write = await fencedWrite(
          this.services,
          taskId,
          { token, revision: this.#ledger.revision },
          next.record,
        );
        if (write.written) {
          this.#ledger = {
            ...this.#ledger,
            revision: write.revision,
            finalWritten: this.#ledger.finalWritten || next.record.final !== undefined,
          };
          this.#stored = Math.max(this.#stored, number);
          this.#settleStored(false);
          next.done?.(true);
        } else {
          this.#ledger = { ...this.#ledger, lost: true };
          next.done?.(false);
          this.#drop();
          this.#tell({ type: 'lease.lost' });
        }
      } catch (error) {
        next.done?.(false);
        if (next.of === 'activity')
          logger.warn({ err: error, taskId }, 'cannot record what the step is doing');
        else if (next.of === 'steering')
          logger.warn({ err: error, taskId }, 'cannot record the pause, resume or message');
        // NATS stayed out of reach: the task goes on, and a crash now would resume it from an older checkpoint.
        else if (isOutage(error)) logger.error({ err: error, taskId }, 'cannot checkpoint workflow');
        else {
          this.#poisoned = true;
          this.#tell({ type: 'checkpoint.poisoned', error });
        }
      }
    }
    this.#writing = false;
    // Writes that failed with nothing stored after them: made again for those still waiting, unless none can be.
    if (this.#storedWaits.length > 0) this.#writeAgain();
    if (!this.#writing) this.#drained?.();
  }

  /**
   * The writes queued, as one: the newest record, which holds all the others did (each record is made from the
   * latest, a checkpoint's snapshot or a later one with what was noted or steered since), told to each of them. Its
   * failure counts as the gravest of theirs: a checkpoint's, then a steering change's, then an activity note's. With
   * a linger of 0, only the oldest: every record is written.
   */
  #takeQueued(): PendingWrite | undefined {
    const queued = this.#queue.splice(0, this.#lingerMs === 0 ? 1 : this.#queue.length);
    this.#taken += queued.length;
    const newest = queued.at(-1);
    if (queued.length <= 1 || newest === undefined) return newest;
    const dones = queued.flatMap((write) => (write.done ? [write.done] : []));
    const of = (['checkpoint', 'steering', 'activity'] as const).find((kind) =>
      queued.some((write) => write.of === kind),
    );
    return {
      record: newest.record,
      of: of ?? newest.of,
      ...(dones.length > 0
        ? {
            done: (written: boolean) => {
              for (const done of dones) done(written);
            },
          }
        : {}),
    };
  }
}

/** Where a detached writer's events go: nobody hears them (see {@link CheckpointWriter.detach}). */
const tellNobody = () => {};
