import { type RecordedTurn, StepJournal } from '../durable/stepJournal.ts';

/**
 * Where one run of a step looks for the model replies its journal recorded (and the told messages read before
 * them, under the same key), with as few reads on its way as it can. The first turn's record is read as the run starts, beside the actor's start-up rather than after it. A turn
 * that follows one whose every tool call this run claimed new is not read at all: a reply recorded for that turn's
 * conversation would have come from a run that made those very calls first, and would have claimed them.
 */
export class RecordedReplies {
  readonly #journal: StepJournal | undefined;
  readonly #stepId: string;
  #first: Promise<RecordedTurn> | undefined;
  /** The turn whose conversation no earlier run can have reached. */
  #unrecorded: number | undefined;
  /**
   * Turns whose reply came from the journal: an earlier run acted on it, and may have claimed its calls. Made at the
   * first such turn: a new run waiting on its model keeps none.
   */
  #replayed: Set<number> | undefined;

  /** `fresh`: no run of the step can have started before this one (the request says so): nothing is recorded yet. */
  constructor(journal: StepJournal | undefined, stepId: string, fresh = false) {
    this.#journal = journal;
    this.#stepId = stepId;
    if (fresh) {
      this.#unrecorded = 1;
      return;
    }
    this.#first = journal?.recordedTurn(StepJournal.modelKey(stepId, 1));
    // Read early and looked at only when the first turn comes: a step stopped before it must not leave a rejection.
    this.#first?.catch(() => undefined);
  }

  /**
   * What the journal holds for this turn (messages told before it, its reply), to match to the turn's conversation;
   * undefined when nothing can be recorded for it. Throws when the journal fails.
   */
  async recorded(turn: number): Promise<RecordedTurn | undefined> {
    const journal = this.#journal;
    if (journal === undefined || turn === this.#unrecorded) return undefined;
    const first = turn === 1 ? this.#first : undefined;
    this.#first = undefined;
    return first ? await first : await journal.recordedTurn(StepJournal.modelKey(this.#stepId, turn));
  }

  /**
   * The reply that stands for `turn` is another run's: replayed from the journal, or recorded first by a run beside
   * this one. That run acted on it, or may be making its calls.
   */
  tookRecorded(turn: number): void {
    this.#replayed ??= new Set();
    this.#replayed.add(turn);
  }

  /** Whether this run made the reply of `turn` itself: its calls are new but for a rare race, and claimed first. */
  madeHere(turn: number): boolean {
    return this.#replayed?.has(turn) !== true;
  }

  /** This run claimed every tool call of `turn` as new: nothing can be recorded for the next turn's conversation. */
  claimedAllNew(turn: number): void {
    this.#unrecorded = turn + 1;
  }
}
