import type { ChatMessage } from '@troupe/llm';
import type { ModelReply } from '@troupe/protocol';
import { StepJournal } from '../durable/stepJournal.ts';

type Match = (messages: readonly ChatMessage[]) => ModelReply | undefined;

/**
 * Where one run of a step looks for the model replies its journal recorded, with as few reads on its way as it
 * can. The first turn's record is read as the run starts, beside the actor's start-up rather than after it. A turn
 * that follows one whose every tool call this run claimed new is not read at all: a reply recorded for that turn's
 * conversation would have come from a run that made those very calls first, and would have claimed them.
 */
export class RecordedReplies {
  readonly #journal: StepJournal | undefined;
  readonly #stepId: string;
  #first: Promise<Match> | undefined;
  /** The turn whose conversation no earlier run can have reached. */
  #unrecorded: number | undefined;
  /** Turns whose reply came from the journal: an earlier run acted on it, and may have claimed its calls. */
  readonly #replayed = new Set<number>();

  /** `fresh`: no run of the step can have started before this one (the request says so): nothing is recorded yet. */
  constructor(journal: StepJournal | undefined, stepId: string, fresh = false) {
    this.#journal = journal;
    this.#stepId = stepId;
    if (fresh) {
      this.#unrecorded = 1;
      return;
    }
    this.#first = journal?.recordedReply(StepJournal.modelKey(stepId, 1));
    // Read early and looked at only when the first turn comes: a step stopped before it must not leave a rejection.
    this.#first?.catch(() => undefined);
  }

  /** The reply recorded for this turn, if it answered this very conversation; throws when the journal fails. */
  async find(turn: number, messages: readonly ChatMessage[]): Promise<ModelReply | undefined> {
    const journal = this.#journal;
    if (journal === undefined || turn === this.#unrecorded) return undefined;
    const first = turn === 1 ? this.#first : undefined;
    this.#first = undefined;
    const found = first
      ? (await first)(messages)
      : await journal.modelReply(StepJournal.modelKey(this.#stepId, turn), messages);
    if (found) this.#replayed.add(turn);
    return found;
  }

  /** The reply that stands for `turn` is another run's, recorded first: that run may be making its calls. */
  tookRecorded(turn: number): void {
    this.#replayed.add(turn);
  }

  /** Whether this run made the reply of `turn` itself: its calls are new but for a rare race, and claimed first. */
  madeHere(turn: number): boolean {
    return !this.#replayed.has(turn);
  }

  /** This run claimed every tool call of `turn` as new: nothing can be recorded for the next turn's conversation. */
  claimedAllNew(turn: number): void {
    this.#unrecorded = turn + 1;
  }
}
