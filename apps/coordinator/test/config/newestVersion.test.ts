import { createLogger, type StatusListener } from '@troupe/runtime';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it, vi } from 'vitest';
import { NEWEST_READ_EVERY_MS, NEWEST_TRUSTED_MS, NewestVersion } from '../../src/config/newestVersion.ts';

/**
 * A registration a test changes, counting its reads. `hold()` keeps the reads sent from then on unanswered until the
 * function it returns lets them go (or until `hold()` is called again: reads sent after that wait for the new hold);
 * `unhold()` lets reads sent after it be answered at once.
 */
function registryOf(first: string | undefined) {
  const registry = {
    version: first as string | undefined,
    unreadable: false,
    reads: 0,
    held: undefined as Promise<void> | undefined,
    hold(): () => void {
      let release = () => {};
      registry.held = new Promise<void>((resolve) => {
        release = resolve;
      });
      return release;
    },
    unhold() {
      registry.held = undefined;
    },
    read: async (): Promise<string | undefined> => {
      registry.reads++;
      const version = registry.version;
      const unreadable = registry.unreadable;
      if (registry.held) await registry.held;
      if (unreadable) throw new Error('no responders');
      return version;
    },
  };
  return registry;
}

/** What a promise has settled to so far: `pending` until it is answered. */
function answerOf<T>(promise: Promise<T>): { value: T | 'pending' } {
  const answer: { value: T | 'pending' } = { value: 'pending' };
  void promise.then((value) => {
    answer.value = value;
  });
  return answer;
}

/** Lets the answered reads' continuations run (a few turns of the microtask queue and one of the event loop). */
const settled = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A connection whose status changes the test announces. */
function connectionStatus() {
  const listeners = new Set<StatusListener>();
  return {
    onStatus: (listener: StatusListener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    announce: (type: string) => {
      for (const listener of listeners) listener({ type });
    },
    listeners,
  };
}

/** Moves the clock to the copy's next read, once that read is scheduled (after the one before it was answered). */
async function nextRead(clock: SimulatedClock): Promise<void> {
  await vi.waitFor(() => expect(clock.pending()).toEqual([NEWEST_READ_EVERY_MS]));
  clock.advance(NEWEST_READ_EVERY_MS);
}

async function started(registry: ReturnType<typeof registryOf>, clock = new SimulatedClock()) {
  const connection = connectionStatus();
  const copy = await NewestVersion.start({
    pipeline: 'demo',
    read: registry.read,
    onStatus: connection.onStatus,
    clock,
    monotonic: () => clock.now(),
    logger: createLogger({ level: 'silent' }),
  });
  return { copy, clock, connection };
}

describe("a coordinator's copy of the newest version", () => {
  it('has the registered version once started, and serves every new task from it with no read', async () => {
    const registry = registryOf('v1');
    const { copy } = await started(registry);
    expect(registry.reads).toBe(1);
    const asked = await Promise.all(Array.from({ length: 100 }, () => copy.newest()));
    expect(new Set(asked)).toEqual(new Set(['v1']));
    expect(registry.reads).toBe(1);
  });

  it('follows a change made elsewhere at its next read, a second later, and a deleted registration too', async () => {
    const registry = registryOf('v1');
    const { copy, clock } = await started(registry);
    registry.version = 'v2';
    // Until its next read, the copy has what it read: the change's one second, documented in durability.md.
    expect(await copy.newest()).toBe('v1');
    await nextRead(clock);
    await vi.waitFor(async () => expect(await copy.newest()).toBe('v2'));
    expect(registry.reads).toBe(2);

    // Deleted or purged: no version is named, and new tasks start on the coordinator's own, as with no registration.
    registry.version = undefined;
    await nextRead(clock);
    await vi.waitFor(async () => expect(await copy.newest()).toBeUndefined());
    registry.version = 'v3';
    await nextRead(clock);
    await vi.waitFor(async () => expect(await copy.newest()).toBe('v3'));
    copy.stop();
  });

  it('takes what this coordinator registers at once, over a read sent before it', async () => {
    const registry = registryOf('v1');
    const { copy, clock } = await started(registry);
    const release = registry.hold();
    await nextRead(clock);
    expect(registry.reads).toBe(2);
    // A reload here registers v2 while that read, which saw v1, is under way.
    copy.registered('v2');
    expect(await copy.newest()).toBe('v2');
    registry.unhold();
    release();
    await vi.waitFor(() => expect(clock.pending()).toEqual([NEWEST_READ_EVERY_MS]));
    expect(await copy.newest()).toBe('v2');
    copy.stop();
  });

  it('is not trusted after a lost connection: new tasks wait for a read, which the reconnection sends', async () => {
    const registry = registryOf('v1');
    const { copy, connection } = await started(registry);
    connection.announce('disconnect');
    registry.version = 'v2';
    registry.unreadable = true;
    // A task delivered meanwhile reads (and fails, as NATS cannot be reached): the coordinator's own version.
    expect(await copy.newest()).toBeUndefined();
    expect(registry.reads).toBe(2);

    registry.unreadable = false;
    const release = registry.hold();
    connection.announce('reconnect');
    expect(registry.reads).toBe(3);
    // Tasks that come before the reconnection's read is answered wait for it, and send none of their own.
    const waiting = Promise.all([copy.newest(), copy.newest(), copy.newest()]);
    release();
    expect(await waiting).toEqual(['v2', 'v2', 'v2']);
    expect(registry.reads).toBe(3);
    copy.stop();
    expect(connection.listeners.size).toBe(0);
  });

  it('reads for each new task while the registry cannot be read, and is trusted again after a read', async () => {
    const registry = registryOf('v1');
    registry.unreadable = true;
    const { copy, clock } = await started(registry);
    expect(await copy.newest()).toBeUndefined();
    expect(registry.reads).toBe(2);
    registry.unreadable = false;
    await nextRead(clock);
    await vi.waitFor(() => expect(registry.reads).toBe(3));
    expect(await copy.newest()).toBe('v1');
    expect(registry.reads).toBe(3);

    // A background read that fails leaves nothing to vouch for: the next task reads, as it would with no copy.
    registry.unreadable = true;
    await nextRead(clock);
    await vi.waitFor(() => expect(registry.reads).toBe(4));
    await vi.waitFor(() => expect(clock.pending()).toEqual([NEWEST_READ_EVERY_MS]));
    expect(await copy.newest()).toBeUndefined();
    expect(registry.reads).toBe(5);
    copy.stop();
  });

  it('is not trusted once its last read is older than it may be (reads held up): a task waits for a newer one', async () => {
    const registry = registryOf('v1');
    const { copy, clock } = await started(registry);
    const release = registry.hold();
    registry.version = 'v2';
    clock.advance(NEWEST_TRUSTED_MS);
    // The read sent meanwhile is not answered: the copy is two seconds old, and a new task waits for that read.
    const asked = copy.newest();
    const answer = answerOf(asked);
    await settled();
    expect(answer.value).toBe('pending');
    expect(registry.reads).toBe(2);
    release();
    expect(await asked).toBe('v2');
    copy.stop();
  });

  it("measures a copy's age on a clock that never goes back: the wall clock set back keeps no copy trusted", async () => {
    const registry = registryOf('v1');
    const clock = new SimulatedClock();
    let elapsed = 0;
    // A wall clock set back an hour after the first read (NTP, an operator): its time says the copy is younger.
    let setBack = 0;
    const copy = await NewestVersion.start({
      pipeline: 'demo',
      read: registry.read,
      clock: {
        now: () => clock.now() - setBack,
        setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
        clearTimeout: (handle) => clock.clearTimeout(handle),
      },
      monotonic: () => elapsed,
      logger: createLogger({ level: 'silent' }),
    });
    setBack = 3_600_000;
    registry.version = 'v2';
    const release = registry.hold();
    elapsed += NEWEST_TRUSTED_MS;
    const asked = copy.newest();
    expect(registry.reads).toBe(2);
    release();
    expect(await asked).toBe('v2');
    copy.stop();
  });

  it('does not take a read sent before a lost connection: a task delivered meanwhile reads again', async () => {
    const registry = registryOf('v1');
    const { copy, clock, connection } = await started(registry);
    registry.version = 'v2';
    // The background read is sent, and the connection is lost before it is answered.
    const release = registry.hold();
    await nextRead(clock);
    expect(registry.reads).toBe(2);
    connection.announce('disconnect');
    registry.unhold();
    // A task's read is one sent after the loss, not the one under way, whose answer may predate it.
    const asked = copy.newest();
    expect(registry.reads).toBe(3);
    expect(await asked).toBe('v2');
    release();
    await settled();
    expect(await copy.newest()).toBe('v2');
    expect(registry.reads).toBe(3);
    copy.stop();
  });

  it('waits after a reconnection for a read sent after it, not for one sent before the connection was lost', async () => {
    const registry = registryOf('v1');
    const { copy, clock, connection } = await started(registry);
    // A rollback elsewhere, say, while a background read is under way and the connection comes and goes.
    registry.version = 'v2';
    const releaseBefore = registry.hold();
    await nextRead(clock);
    expect(registry.reads).toBe(2);
    connection.announce('disconnect');
    const releaseAfter = registry.hold();
    connection.announce('reconnect');
    // The reconnection sends a read of its own.
    expect(registry.reads).toBe(3);
    const asked = copy.newest();
    const answer = answerOf(asked);
    // The read sent before the loss is answered first: the task does not take it, nor start on its coordinator's own
    // version for want of an answer; it waits for the reconnection's read.
    releaseBefore();
    await settled();
    expect(answer.value).toBe('pending');
    releaseAfter();
    expect(await asked).toBe('v2');
    expect(registry.reads).toBe(3);
    copy.stop();
  });

  it('reads again for a task whose read a lost connection made out of date', async () => {
    const registry = registryOf('v1');
    const { copy, connection } = await started(registry);
    registry.version = 'v2';
    connection.announce('disconnect');
    // A task delivered while the connection is lost reads; the connection comes back before that read is answered.
    const releaseLost = registry.hold();
    const asked = copy.newest();
    expect(registry.reads).toBe(2);
    const releaseBack = registry.hold();
    connection.announce('reconnect');
    expect(registry.reads).toBe(3);
    const answer = answerOf(asked);
    releaseLost();
    await settled();
    // Its read is out of date, not failed: the task waits for the one sent after the reconnection.
    expect(answer.value).toBe('pending');
    releaseBack();
    expect(await asked).toBe('v2');
    expect(registry.reads).toBe(3);
    copy.stop();
  });

  it('reads no more once stopped', async () => {
    const registry = registryOf('v1');
    const { copy, clock } = await started(registry);
    copy.stop();
    clock.advance(10 * NEWEST_READ_EVERY_MS);
    expect(registry.reads).toBe(1);
    expect(clock.pending()).toEqual([]);
  });

  it('reads no more once its connection is closed', async () => {
    const registry = registryOf('v1');
    const { clock, connection } = await started(registry);
    connection.announce('close');
    clock.advance(10 * NEWEST_READ_EVERY_MS);
    expect(registry.reads).toBe(1);
    expect(clock.pending()).toEqual([]);
    expect(connection.listeners.size).toBe(0);
  });
});
