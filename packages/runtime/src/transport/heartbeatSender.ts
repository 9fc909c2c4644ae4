import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { StepHeartbeat } from '@troupe/protocol';
import { type Clock, every, systemClock } from '../events/clock.ts';
import type { Logger } from '../logging/logger.ts';
import { withTimeout } from '../withTimeout.ts';
import type { Bus, JetStreamBus, Listening } from './bus.ts';
import { connectionOptions, type NatsAccess } from './natsAccess.ts';

/** Whether a requester still listens on its inbox, as the last heartbeat found out. */
export type ListeningReport = (stepId: string, inbox: string, listening: boolean) => void;

/**
 * Whether a heartbeat's requester is still there. Gone when the server says nobody listens; also when it has
 * acknowledged heartbeats before and now does not: across NATS accounts nats-server 2.9 reports no listener as
 * silence, so a workflow acknowledges each heartbeat. Silence from one that never acknowledged (a workflow of an
 * earlier release) says nothing.
 */
export function stillThere(found: Listening, acknowledgedBefore: boolean): boolean {
  return found === 'answered' || (found === 'unanswered' && !acknowledgedBefore);
}

/**
 * Sends a running step's heartbeats to the inboxes of those waiting for it, every `intervalMs`, and reports for each
 * heartbeat whether its inbox is still listened to (the server says "no responders" once nobody does).
 */
export interface HeartbeatSender {
  /**
   * Starts (or updates) a step's heartbeats. One goes at once when the step is new or what it says changed (the
   * step began or stopped waiting for a person), so the workflow hears of it without waiting for the next beat.
   */
  beat(stepId: string, inboxes: readonly string[], intervalMs: number, heartbeat: StepHeartbeat): void;
  /** Stops a step's heartbeats. */
  stop(stepId: string): void;
  /** Adds a listener for listening reports; returns how to remove it. */
  onListening(report: ListeningReport): () => void;
  close(): Promise<void>;
}

/**
 * Heartbeats sent from this thread, on the bus's connection: simple, but late when this thread is busy. For the
 * hosts of a real process use {@link ThreadedHeartbeatSender}.
 */
export class InlineHeartbeatSender implements HeartbeatSender {
  readonly #bus: Bus;
  readonly #clock: Clock;
  readonly #steps = new Map<
    string,
    {
      inboxes: readonly string[];
      heartbeat: StepHeartbeat;
      stop: () => void;
      /** The inboxes whose requesters have acknowledged a heartbeat; made at the first acknowledgement. */
      acknowledged: Set<string> | undefined;
    }
  >();
  readonly #listeners = new Listeners();

  constructor(bus: Bus, clock: Clock = systemClock) {
    this.#bus = bus;
    this.#clock = clock;
  }

  beat(stepId: string, inboxes: readonly string[], intervalMs: number, heartbeat: StepHeartbeat): void {
    const known = this.#steps.get(stepId);
    if (known) {
      const changed = JSON.stringify(known.heartbeat) !== JSON.stringify(heartbeat);
      known.inboxes = inboxes;
      known.heartbeat = heartbeat;
      if (changed) this.#send(stepId, intervalMs);
      return;
    }
    const step = {
      inboxes,
      heartbeat,
      stop: every(this.#clock, intervalMs, () => this.#send(stepId, intervalMs)),
      acknowledged: undefined,
    };
    this.#steps.set(stepId, step);
    this.#send(stepId, intervalMs);
  }

  stop(stepId: string): void {
    this.#steps.get(stepId)?.stop();
    this.#steps.delete(stepId);
  }

  onListening(report: ListeningReport): () => void {
    return this.#listeners.add(report);
  }

  async close(): Promise<void> {
    for (const stepId of [...this.#steps.keys()]) this.stop(stepId);
  }

  #send(stepId: string, intervalMs: number): void {
    const step = this.#steps.get(stepId);
    if (!step) return;
    for (const inbox of step.inboxes) {
      void this.#bus
        .stillListening(inbox, step.heartbeat, intervalMs, { taskId: taskOf(stepId), kind: 'step.heartbeat' })
        .then((found) => {
          const there = stillThere(found, step.acknowledged?.has(inbox) === true);
          if (found === 'answered') {
            step.acknowledged ??= new Set();
            step.acknowledged.add(inbox);
          }
          this.#listeners.report(stepId, inbox, there);
        });
    }
  }
}

/**
 * The heartbeat thread's whole program, plain JavaScript evaluated in a worker so it needs no TypeScript loader.
 * It has its own NATS connection and its own event loop, so a main thread busy with a step's work (or with many
 * steps) cannot starve the heartbeats that say the step is alive. It stops beating when the main thread has not
 * ticked for `hungAfterMs`: a process that is truly stuck must look dead, so its steps are taken over.
 */
const PROGRAM = `
const { parentPort, workerData } = require('node:worker_threads');
const { connect, nkeyAuthenticator, credsAuthenticator } = require(workerData.natsPath);
const tick = new BigInt64Array(workerData.tick);
const steps = new Map();
let nc;
const mainAlive = () => Date.now() - Number(Atomics.load(tick, 0)) < workerData.hungAfterMs;
function send(stepId) {
  const step = steps.get(stepId);
  if (!step || !nc || nc.isClosed() || !mainAlive()) return;
  const data = JSON.stringify(step.heartbeat);
  for (const inbox of step.inboxes) {
    // As stillThere() says: gone when nobody listens, or when a requester that acknowledged before is silent.
    nc.request(inbox, data, { timeout: step.intervalMs }).then(
      () => {
        step.acknowledged.add(inbox);
        parentPort.postMessage({ type: 'listening', stepId, inbox, listening: true });
      },
      (error) => {
        const gone =
          (typeof error?.isNoResponders === 'function' && error.isNoResponders()) ||
          (error?.name === 'TimeoutError' && step.acknowledged.has(inbox));
        parentPort.postMessage({ type: 'listening', stepId, inbox, listening: !gone });
      },
    );
  }
}
parentPort.on('message', (message) => {
  if (message.type === 'beat') {
    const known = steps.get(message.stepId);
    if (known) {
      const changed = JSON.stringify(known.heartbeat) !== JSON.stringify(message.heartbeat);
      known.inboxes = message.inboxes;
      known.heartbeat = message.heartbeat;
      if (changed) send(message.stepId);
      return;
    }
    const step = {
      inboxes: message.inboxes,
      heartbeat: message.heartbeat,
      intervalMs: message.intervalMs,
      acknowledged: new Set(),
    };
    step.timer = setInterval(() => send(message.stepId), message.intervalMs);
    steps.set(message.stepId, step);
    send(message.stepId);
  } else if (message.type === 'stop') {
    clearInterval(steps.get(message.stepId)?.timer);
    steps.delete(message.stepId);
  } else if (message.type === 'close') {
    for (const step of steps.values()) clearInterval(step.timer);
    steps.clear();
    Promise.resolve(nc && nc.close()).finally(() => parentPort.postMessage({ type: 'closed' }));
  }
});
const { nkeySeed, creds, ...plain } = workerData.access;
const authenticator = [
  ...(nkeySeed === undefined ? [] : [nkeyAuthenticator(new TextEncoder().encode(nkeySeed))]),
  ...(creds === undefined ? [] : [credsAuthenticator(new TextEncoder().encode(creds))]),
];
connect({
  ...plain,
  ...(authenticator.length > 0 ? { authenticator } : {}),
  servers: workerData.servers,
  name: workerData.name,
  reconnect: true,
  maxReconnectAttempts: -1,
}).then(
  (connection) => {
    nc = connection;
    // A refusal by the server (a heartbeat its user may not send) is said in the host's log, not lost here.
    (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'error') parentPort.postMessage({ type: 'error', message: String(status.error && status.error.message) });
      }
    })().catch(() => {});
    for (const stepId of steps.keys()) send(stepId);
    parentPort.postMessage({ type: 'ready' });
  },
  (error) => parentPort.postMessage({ type: 'failed', message: String(error && error.message) }),
);
`;

/** How often the main thread says it is alive to the heartbeat thread. */
const TICK_MS = 1_000;
/** A main thread silent this long is stuck: its heartbeats stop, so its steps go to another worker. */
const HUNG_AFTER_MS = 60_000;

export interface ThreadedHeartbeatOptions {
  bus: JetStreamBus;
  logger: Logger;
  /** See {@link HUNG_AFTER_MS}. */
  hungAfterMs?: number;
}

/**
 * Heartbeats sent from a worker thread with a connection of its own (see the program above), so they keep
 * going while this thread is busy. Until the thread has connected, and if it cannot start, heartbeats go out
 * inline instead (logged once), so a step is never left without them.
 */
export class ThreadedHeartbeatSender implements HeartbeatSender {
  readonly #worker: Worker;
  readonly #inline: InlineHeartbeatSender;
  readonly #logger: Logger;
  readonly #tick = new BigInt64Array(new SharedArrayBuffer(8));
  readonly #ticker: NodeJS.Timeout;
  /** Steps being beaten, as last told, so they can move to the thread once it is ready. */
  readonly #steps = new Map<
    string,
    { inboxes: readonly string[]; intervalMs: number; heartbeat: StepHeartbeat }
  >();
  #state: 'starting' | 'ready' | 'failed' | 'closed' = 'starting';
  readonly #listeners = new Listeners();
  #closed: (() => void) | undefined;
  #started: (running: boolean) => void = () => {};
  /**
   * Settles once the thread is connected (true) or could not start (false: heartbeats go out inline). Hosts wait
   * for it before serving, so no step starts with heartbeats a busy thread could hold up.
   */
  readonly started = new Promise<boolean>((resolve) => (this.#started = resolve));

  constructor(options: ThreadedHeartbeatOptions) {
    const { bus, logger } = options;
    this.#logger = logger;
    this.#inline = new InlineHeartbeatSender(bus);
    this.#inline.onListening((...args) => this.#listeners.report(...args));
    Atomics.store(this.#tick, 0, BigInt(Date.now()));
    this.#ticker = setInterval(() => Atomics.store(this.#tick, 0, BigInt(Date.now())), TICK_MS);
    this.#ticker.unref();
    this.#worker = new Worker(PROGRAM, {
      eval: true,
      workerData: {
        natsPath: createRequire(import.meta.url).resolve('@nats-io/transport-node'),
        servers: [...bus.servers],
        name: `${bus.name}-heartbeats`,
        // Logged in as the bus is, with the same inbox prefix: text only, as a worker thread takes it.
        access: heartbeatAccess(bus.access),
        tick: this.#tick.buffer,
        hungAfterMs: options.hungAfterMs ?? HUNG_AFTER_MS,
      },
      resourceLimits: { maxOldGenerationSizeMb: 64 },
    });
    this.#worker.unref();
    this.#worker.on('message', (message: WorkerMessage) => this.#onMessage(message));
    this.#worker.on('error', (error) => this.#fail(error.message));
    this.#worker.on('exit', () => {
      if (this.#state !== 'closed') this.#fail('the heartbeat thread exited');
      this.#closed?.();
    });
  }

  beat(stepId: string, inboxes: readonly string[], intervalMs: number, heartbeat: StepHeartbeat): void {
    this.#steps.set(stepId, { inboxes: [...inboxes], intervalMs, heartbeat });
    if (this.#state === 'ready') {
      this.#worker.postMessage({ type: 'beat', stepId, inboxes: [...inboxes], intervalMs, heartbeat });
    } else if (this.#state !== 'closed') {
      this.#inline.beat(stepId, inboxes, intervalMs, heartbeat);
    }
  }

  stop(stepId: string): void {
    this.#steps.delete(stepId);
    this.#inline.stop(stepId);
    if (this.#state === 'ready') this.#worker.postMessage({ type: 'stop', stepId });
  }

  onListening(report: ListeningReport): () => void {
    return this.#listeners.add(report);
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    const wasReady = this.#state === 'ready';
    this.#state = 'closed';
    this.#started(false);
    clearInterval(this.#ticker);
    await this.#inline.close();
    if (!wasReady) {
      await this.#worker.terminate();
      return;
    }
    const exited = new Promise<void>((resolve) => (this.#closed = resolve));
    this.#worker.postMessage({ type: 'close' });
    // The thread closes its connection and says so; it is then ended, as it holds nothing else.
    await withTimeout(exited, 2_000, { unref: true });
    await this.#worker.terminate();
  }

  #onMessage(message: WorkerMessage): void {
    if (message.type === 'listening')
      this.#listeners.report(message.stepId, message.inbox, message.listening);
    else if (message.type === 'ready') this.#ready();
    else if (message.type === 'failed') this.#fail(message.message);
    else if (message.type === 'error')
      this.#logger.error(`NATS connection error (heartbeats): ${message.message}`);
    else if (message.type === 'closed') void this.#worker.terminate();
  }

  /** The thread is connected: the steps beaten inline so far move to it. */
  #ready(): void {
    if (this.#state !== 'starting') return;
    this.#state = 'ready';
    this.#started(true);
    for (const [stepId, step] of this.#steps) {
      this.#inline.stop(stepId);
      this.#worker.postMessage({ type: 'beat', stepId, ...step, inboxes: [...step.inboxes] });
    }
  }

  #fail(message: string): void {
    if (this.#state === 'closed' || this.#state === 'failed') return;
    const wasReady = this.#state === 'ready';
    this.#state = 'failed';
    this.#started(false);
    this.#logger.warn(
      { reason: message },
      'the heartbeat thread is not running; step heartbeats go out from the main thread, where a busy process may delay them',
    );
    if (!wasReady) return;
    for (const [stepId, step] of this.#steps)
      this.#inline.beat(stepId, step.inboxes, step.intervalMs, step.heartbeat);
  }
}

type WorkerMessage =
  | { type: 'listening'; stepId: string; inbox: string; listening: boolean }
  | { type: 'ready' }
  | { type: 'closed' }
  | { type: 'failed'; message: string }
  /** The server refused something the thread sent (a permission violation, say). */
  | { type: 'error'; message: string };

/** The listeners of a sender; one that throws does not keep the report from the others. */
class Listeners {
  readonly #all = new Set<ListeningReport>();

  add(report: ListeningReport): () => void {
    this.#all.add(report);
    return () => this.#all.delete(report);
  }

  report(stepId: string, inbox: string, listening: boolean): void {
    for (const listener of this.#all) {
      try {
        listener(stepId, inbox, listening);
      } catch {
        // A listener's own fault; the heartbeat went out.
      }
    }
  }
}

/** Step ids are `<taskId>.<step>.<round>`. */
const taskOf = (stepId: string): string => stepId.slice(0, stepId.indexOf('.'));

/** The bus's access as the heartbeat thread connects with it: plain options, and the seeds it wraps itself. */
function heartbeatAccess(access: NatsAccess | undefined): Record<string, unknown> {
  const { nkeySeed, creds, ...rest } = access ?? {};
  const plain = connectionOptions(rest);
  return {
    ...plain,
    ...(nkeySeed === undefined ? {} : { nkeySeed }),
    ...(creds === undefined ? {} : { creds }),
  };
}
