import { errorMessage } from '@troupe/protocol';
import type { Clock, Logger, StatusListener } from '@troupe/runtime';
import { shortVersion } from './pipelineVersion.ts';

/** How often a coordinator reads each of its pipelines' registrations again, to follow a change made elsewhere. */
export const NEWEST_READ_EVERY_MS = 1_000;

/**
 * How long a copy is trusted after the read that made it: past it (reads late because the process was held up),
 * a new task reads the registry itself, as it would with no copy.
 */
export const NEWEST_TRUSTED_MS = 5_000;

export interface NewestVersionOptions {
  pipeline: string;
  /**
   * Reads the registration now: the version it names newest, undefined when it names none or is gone (deleted,
   * purged); throws when it cannot be read.
   */
  read: () => Promise<string | undefined>;
  /** Connection status changes (a bus's `onStatus`): a lost connection leaves the copy unsure until a read after it. */
  onStatus?: (listener: StatusListener) => () => void;
  clock: Clock;
  logger: Logger;
  /** Default {@link NEWEST_READ_EVERY_MS}. */
  readEveryMs?: number;
}

/**
 * A coordinator's copy of the version one pipeline's registration (`$KV.pipelines.<pipeline>`) names newest, the one
 * new tasks start on: read once a second in the background, so a new task asks it and sends no message. A copy the
 * coordinator cannot vouch for (before its first read, after a failed one or a lost connection, or not read for
 * {@link NEWEST_TRUSTED_MS}) is not used: the task waits for a read, as it did before there was a copy.
 */
export class NewestVersion {
  readonly #o: NewestVersionOptions;
  /** What the last read found, and when it was sent; undefined while the copy cannot be vouched for. */
  #known: { version: string | undefined; at: number } | undefined;
  /** The read under way: every task that needs one waits for it rather than sending its own. */
  #reading: Promise<void> | undefined;
  /** Moved on by what makes a read under way out of date (a registration made here, a lost connection). */
  #generation = 0;
  #failing = false;
  #timer: unknown;
  #stopped = false;
  readonly #unwatch: () => void;

  private constructor(options: NewestVersionOptions) {
    this.#o = options;
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
  newest(): Promise<string | undefined> {
    const known = this.#known;
    if (known !== undefined && this.#o.clock.now() - known.at < NEWEST_TRUSTED_MS) {
      return Promise.resolve(known.version);
    }
    return this.#refresh().then(() => this.#known?.version);
  }

  /**
   * What this coordinator has just registered as the newest (a start, a reload): in the copy at once, over any
   * read sent before it.
   */
  registered(version: string): void {
    this.#generation++;
    this.#known = { version, at: this.#o.clock.now() };
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

  #refresh(): Promise<void> {
    this.#reading ??= this.#read().finally(() => {
      this.#reading = undefined;
    });
    return this.#reading;
  }

  async #read(): Promise<void> {
    const { pipeline, logger, clock } = this.#o;
    const generation = this.#generation;
    const at = clock.now();
    try {
      const version = await this.#o.read();
      if (generation !== this.#generation) return;
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
    } catch (error) {
      if (generation !== this.#generation) return;
      this.#known = undefined;
      if (this.#failing) return;
      this.#failing = true;
      logger.warn(
        { err: error, pipeline },
        `pipeline ${pipeline}: cannot read the registry (${errorMessage(error)}); new tasks start on this coordinator's version until it can be read`,
      );
    }
  }
}
