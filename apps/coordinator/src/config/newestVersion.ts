import { errorMessage } from '@troupe/protocol';
import type { Clock, Logger, StatusListener } from '@troupe/runtime';
import { shortVersion } from './pipelineVersion.ts';

/** How often a coordinator reads each of its pipelines' registrations again, to follow a change made elsewhere. */
export const NEWEST_READ_EVERY_MS = 1_000;

/**
 * How long a copy is trusted after the read that made it was sent: past it (reads slow, or late because the process
 * was held up), a new task waits for a read, as it would with no copy. It bounds how late a change made elsewhere
 * reaches new tasks: a read sent after the change sees it (reads go to the bucket's leader). Reads answered within
 * half a second keep the copy trusted without a lapse; slower ones make tasks wait for the read under way, not send one.
 */
export const NEWEST_TRUSTED_MS = 2_000;

/** What a read did to the copy: what it found; or failed; or discarded, out of date before it was answered. */
type ReadOutcome = { found: string | undefined } | 'failed' | 'discarded';

export interface NewestVersionOptions {
  pipeline: string;
  /**
   * Reads the registration now: the version it names newest, undefined when it names none or is gone (deleted,
   * purged); throws when it cannot be read.
   */
  read: () => Promise<string | undefined>;
  /** Connection status changes (a bus's `onStatus`): a lost connection leaves the copy unsure until a read after it. */
  onStatus?: (listener: StatusListener) => () => void;
  /** Runs the reads' timers. */
  clock: Clock;
  /**
   * Milliseconds on a clock that never goes back, for a copy's age: the wall clock set back would keep an old copy
   * trusted. Default `performance.now()`; a test passes its simulated clock's time.
   */
  monotonic?: () => number;
  logger: Logger;
  /** Default {@link NEWEST_READ_EVERY_MS}. */
  readEveryMs?: number;
}

/**
 * A coordinator's copy of the version one pipeline's registration (`$KV.pipelines.<pipeline>`) names newest, the one
 * new tasks start on: read once a second in the background, so a new task asks it and sends no message. A copy the
 * coordinator cannot vouch for (before its first read, after a failed one, from a lost connection until a read sent
 * after the reconnection, or not read for {@link NEWEST_TRUSTED_MS}) is not used: the task waits for a read, as it
 * did before there was a copy.
 */
export class NewestVersion {
  readonly #o: NewestVersionOptions;
  readonly #monotonic: () => number;
  /** What the last read found, and when it was sent (monotonic); undefined while the copy cannot be vouched for. */
  #known: { version: string | undefined; at: number } | undefined;
  /**
   * The read under way, with the generation it was sent in: every task that needs one waits for it rather than
   * sending its own, unless the generation has moved on since (its answer will be discarded).
   */
  #reading: { generation: number; outcome: Promise<ReadOutcome> } | undefined;
  /**
   * Moved on by what makes a read under way out of date: a registration made here, a lost connection, a
   * reconnection (a read sent before it may have been answered by what the connection saw before it was lost).
   */
  #generation = 0;
  #failing = false;
  #timer: unknown;
  #stopped = false;
  readonly #unwatch: () => void;

  private constructor(options: NewestVersionOptions) {
    this.#o = options;
    this.#monotonic = options.monotonic ?? (() => performance.now());
    this.#unwatch = options.onStatus?.(({ type }) => this.#statusChanged(type)) ?? (() => {});
  }

  /** Starts following the registration: read once before it returns, then every {@link NEWEST_READ_EVERY_MS}. */
  static async start(options: NewestVersionOptions): Promise<NewestVersion> {
    const copy = new NewestVersion(options);
    await copy.#refresh();
    copy.#schedule();
    return copy;
  }

  /**
   * The version new tasks start on, as the registration names it: at once from the copy, or from a read when the
   * copy cannot be vouched for. Undefined when the registration names none or cannot be read.
   */
  async newest(): Promise<string | undefined> {
    for (;;) {
      const known = this.#known;
      if (known !== undefined && this.#monotonic() - known.at < NEWEST_TRUSTED_MS) return known.version;
      const outcome = await this.#refresh();
      if (outcome === 'failed') return undefined;
      // Discarded: what made it out of date (a lost connection, a reconnection) needs a read sent after it, unless a
      // registration made here has set the copy meanwhile.
      if (outcome !== 'discarded') return outcome.found;
    }
  }

  /**
   * What this coordinator has just registered as the newest (a start, a reload): in the copy at once, over any
   * read sent before it.
   */
  registered(version: string): void {
    this.#generation++;
    this.#known = { version, at: this.#monotonic() };
  }

  /** Stops reading. */
  stop(): void {
    this.#stopped = true;
    this.#o.clock.clearTimeout(this.#timer);
    this.#unwatch();
  }

  #statusChanged(type: string): void {
    if (type === 'disconnect') {
      // Changes made while it is lost are never seen by a read sent before: the copy waits for one sent after.
      this.#generation++;
      this.#known = undefined;
    } else if (type === 'reconnect' && !this.#stopped) {
      // A read sent before may still be under way, written to the lost connection: one sent now is the one to wait for.
      this.#generation++;
      this.#known = undefined;
      void this.#refresh();
    } else if (type === 'close') {
      // Nothing can be read on a closed connection: a coordinator whose bus was closed under it stops reading.
      this.stop();
    }
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = this.#o.clock.setTimeout(() => {
      void this.#refresh().then(() => this.#schedule());
    }, this.#o.readEveryMs ?? NEWEST_READ_EVERY_MS);
  }

  /** The read under way in this generation, or a new one. */
  #refresh(): Promise<ReadOutcome> {
    const generation = this.#generation;
    if (this.#reading?.generation === generation) return this.#reading.outcome;
    const reading = {
      generation,
      outcome: this.#read(generation).finally(() => {
        if (this.#reading === reading) this.#reading = undefined;
      }),
    };
    this.#reading = reading;
    return reading.outcome;
  }

  async #read(generation: number): Promise<ReadOutcome> {
    const { pipeline, logger } = this.#o;
    const at = this.#monotonic();
    try {
      const version = await this.#o.read();
      if (generation !== this.#generation) return 'discarded';
      if (this.#failing) {
        logger.info({ pipeline }, `pipeline ${pipeline}: the registry can be read again`);
      } else if (this.#known !== undefined && this.#known.version !== version) {
        logger.info(
          { pipeline, version },
          `pipeline ${pipeline}: new tasks start on version ${version === undefined ? "this coordinator's own" : shortVersion(version)}, as the registry now says`,
        );
      }
      this.#failing = false;
      this.#known = { version, at };
      return { found: version };
    } catch (error) {
      if (generation !== this.#generation) return 'discarded';
      this.#known = undefined;
      if (this.#failing) return 'failed';
      this.#failing = true;
      logger.warn(
        { err: error, pipeline },
        `pipeline ${pipeline}: cannot read the registry (${errorMessage(error)}); new tasks start on this coordinator's version until it can be read`,
      );
      return 'failed';
    }
  }
}
