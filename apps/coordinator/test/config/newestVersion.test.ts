import { createLogger, type StatusListener } from '@troupe/runtime';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it, vi } from 'vitest';
import { NEWEST_READ_EVERY_MS, NEWEST_TRUSTED_MS, NewestVersion } from '../../src/config/newestVersion.ts';

/** A registration a test changes, counting its reads; `held` keeps the next reads waiting until it is let go. */
function registryOf(first: string | undefined) {
  const registry = {
    version: first as string | undefined,
    unreadable: false,
    reads: 0,
    held: undefined as { promise: Promise<void>; release: () => void } | undefined,
    hold() {
      let release = () => {};
      const promise = new Promise<void>((resolve) => {
        release = resolve;
      });
      registry.held = { promise, release };
    },
    read: async (): Promise<string | undefined> => {
      registry.reads++;
      const version = registry.version;
      const unreadable = registry.unreadable;
      if (registry.held) await registry.held.promise;
      if (unreadable) throw new Error('no responders');
      return version;
    },
  };
  return registry;
}

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
    registry.hold();
    await nextRead(clock);
    expect(registry.reads).toBe(2);
    // A reload here registers v2 while that read, which saw v1, is under way.
    copy.registered('v2');
    expect(await copy.newest()).toBe('v2');
    registry.held?.release();
    registry.held = undefined;
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
    registry.hold();
    connection.announce('reconnect');
    expect(registry.reads).toBe(3);
    // Tasks that come before the reconnection's read is answered wait for it, and send none of their own.
    const waiting = Promise.all([copy.newest(), copy.newest(), copy.newest()]);
    registry.held?.release();
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
    registry.hold();
    registry.version = 'v2';
    clock.advance(NEWEST_TRUSTED_MS);
    // The reads sent meanwhile are not answered: the copy is five seconds old, and a new task waits.
    let answered: string | undefined;
    const asked = copy.newest().then((version) => {
      answered = version;
    });
    await Promise.resolve();
    expect(answered).toBeUndefined();
    registry.held?.release();
    await asked;
    expect(answered).toBe('v2');
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
