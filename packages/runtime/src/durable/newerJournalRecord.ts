import { JournalEntry } from '@troupe/protocol';
import { z } from 'zod';

/** The kinds of journal record this host knows. */
const KNOWN_KINDS: ReadonlySet<string> = new Set(
  JournalEntry.options.map((option) => option.shape.kind.value),
);

/**
 * A record of a kind this host does not know: a newer host wrote it (as `told` was new in its release). Read as
 * itself, not dropped as unreadable: a reader that took it for nothing would ask the model or run a tool again where
 * the newer host recorded what it did.
 */
const NewerRecord = z.looseObject({ kind: z.string().refine((kind) => !KNOWN_KINDS.has(kind)) });

/**
 * A journal record as a reader finds it: one this host knows, or one of a kind only a newer host knows. A record of
 * a known kind that does not match its schema is neither (the store reports it absent, as before).
 */
export const JournalRecord = z.union([JournalEntry, NewerRecord]);
export type JournalRecord = z.infer<typeof JournalRecord>;

/** Whether this host knows the record's kind. */
export const isKnownRecord = (record: JournalRecord): record is JournalEntry => KNOWN_KINDS.has(record.kind);

/**
 * A step's journal holds a record this host cannot read: a newer Troupe host wrote it. Running on without it would
 * replay the step wrongly, so the step stops instead; the agent step fails `journal_unavailable`, which every
 * workflow sends again, so a host that knows the record (an upgraded one) goes on from the journal.
 *
 * @example
 * if (!isKnownRecord(record)) throw new NewerJournalRecordError(key, record.kind);
 */
export class NewerJournalRecordError extends Error {
  override readonly name = 'NewerJournalRecord';
  /** Stable: what the host's log and the step's failure name it by. */
  readonly code = 'journal_from_newer_host';
  readonly key: string;
  readonly kind: string;

  constructor(key: string, kind: string) {
    super(
      `journal record ${key} is of kind "${kind}", which this Troupe host does not know: a newer Troupe host wrote it ` +
        '(journal_from_newer_host). Upgrade this host to the release the other hosts of the pipeline run ' +
        '(docs/operations.md, Upgrades); meanwhile the step is sent again, and a host that knows the record goes on ' +
        'from the journal',
    );
    this.key = key;
    this.kind = kind;
  }

  /** True when `error` is a NewerJournalRecordError. */
  static is(error: unknown): error is NewerJournalRecordError {
    return error instanceof NewerJournalRecordError;
  }
}
