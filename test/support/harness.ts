import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  builtinTools,
  type Coordinator,
  type IntakeLimits,
  loadPipeline,
  startCoordinator,
} from '@troupe/coordinator';
import {
  type EventOf,
  eventsOf as eventsOfMessage,
  FINAL_EVENT_KINDS,
  InvalidMessageEvent,
  parseMessage,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import { createLogger, type Logger, NatsBus, type Tool } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';

export const repoRoot = join(import.meta.dirname, '..', '..');
export const examplePath = (name: string) => join(repoRoot, 'examples', name);
export const fixturePath = (name: string) => join(import.meta.dirname, '..', 'fixtures', name);

/** A real nats-server, a coordinator on it, and a plain NATS client that records every event. */
export interface Harness {
  nats: TestNats;
  coordinator: Coordinator;
  bus: NatsBus;
  /** A plain nats.js client, as a user's own program would have. */
  client: NatsConnection;
  workspaceRoot: string;
  events: TroupeEvent[];
  invalid: InvalidMessageEvent[];
  eventsOf(taskId: string): TroupeEvent[];
  /** Resolves with the task's final event; rejects after `timeoutMs`. */
  finalOf(taskId: string, timeoutMs?: number): Promise<TroupeEvent>;
  /** Resolves with the first invalid-message report matching `match`. */
  nextInvalid(match: (e: InvalidMessageEvent) => boolean, timeoutMs?: number): Promise<InvalidMessageEvent>;
  stop(): Promise<void>;
}

export interface HarnessOptions {
  /** The environment API keys are read from. */
  env?: Record<string, string | undefined>;
  /** Collects every log line the coordinator writes (at info level and up). */
  logLines?: string[];
  /** Host the agents in the coordinator (default true); false leaves them to workers. */
  hostAgents?: boolean;
  /** Deliveries of a task before it is dead-lettered. */
  maxDeliver?: number;
  /** How large and deep task payloads may be. */
  limits?: IntakeLimits;
  /** How long a task may go unacknowledged before it is delivered again. */
  ackWaitMs?: number;
  /** How often agent hosts report on a step. */
  stepHeartbeatMs?: number;
  /** Tools besides the built-ins that the pipelines may name. */
  tools?: Tool[];
  /** The most tasks per pipeline worked on at once. */
  concurrency?: number;
  /** How long a task's end waits for its final event before it says so, and a stop for such an end. */
  finalEventWaitMs?: number;
  /** Whether the coordinator's bus sends a task's events in batches (`BusOptions.eventBatch`, on by default). */
  eventBatch?: boolean;
  /** How many steps the coordinator runs in-process at once (`CoordinatorOptions.maxLocalSteps`; 0: all over NATS). */
  maxLocalSteps?: number;
}

export async function startHarness(pipelineFiles: string[], options: HarnessOptions = {}): Promise<Harness> {
  const nats = await startTestNats();
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-ws-'));
  const lines = options.logLines;
  const logger: Logger = lines
    ? createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } })
    : createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
  const bus = await NatsBus.connect({
    servers: nats.url,
    name: 'test-coordinator',
    logger,
    ...(options.eventBatch === undefined ? {} : { eventBatch: options.eventBatch }),
  });
  const registry = builtinTools();
  for (const tool of options.tools ?? []) registry.register(tool);
  const pipelines = await Promise.all(
    pipelineFiles.map((f) =>
      loadPipeline(f, { toolNames: registry.names(), ...(options.env ? { env: options.env } : {}) }),
    ),
  );
  const coordinator = await startCoordinator({
    bus,
    pipelines,
    logger,
    workspaceRoot,
    registry,
    noResponderWaitMs: 5_000,
    ...(options.hostAgents === false ? { hostAgents: false } : {}),
    ...(options.maxDeliver === undefined ? {} : { maxDeliver: options.maxDeliver }),
    ...(options.limits === undefined ? {} : { limits: options.limits }),
    ...(options.ackWaitMs === undefined ? {} : { ackWaitMs: options.ackWaitMs }),
    ...(options.stepHeartbeatMs === undefined ? {} : { stepHeartbeatMs: options.stepHeartbeatMs }),
    ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    ...(options.finalEventWaitMs === undefined ? {} : { finalEventWaitMs: options.finalEventWaitMs }),
    ...(options.maxLocalSteps === undefined ? {} : { maxLocalSteps: options.maxLocalSteps }),
  });
  const client = await connect({ servers: nats.url, name: 'test-user' });
  const events: TroupeEvent[] = [];
  const invalid: InvalidMessageEvent[] = [];
  const { notify, waitFor } = waiter();
  // A test that publishes garbage on these subjects must not break the recorder: what does not parse is skipped.
  client.subscribe(subjects.allTaskEvents, {
    callback: (_error, msg) => {
      // One event, or a batch of them (event batching, the default), in order.
      const parsed = eventsOfMessage(msg.data, msg.subject);
      if (!parsed.ok) return;
      events.push(...parsed.value);
      notify();
    },
  });
  client.subscribe(subjects.invalid, {
    callback: (_error, msg) => {
      const parsed = parseMessage(InvalidMessageEvent, msg.data);
      if (!parsed.ok) return;
      invalid.push(parsed.value);
      notify();
    },
  });
  await client.flush();

  const eventsOf = (taskId: string) => events.filter((e) => e.taskId === taskId);
  return {
    nats,
    coordinator,
    bus,
    client,
    workspaceRoot,
    events,
    invalid,
    eventsOf,
    finalOf: (taskId, timeoutMs = 30_000) =>
      waitFor(
        () => eventsOf(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
        `the end of task ${taskId}`,
        timeoutMs,
      ),
    nextInvalid: (match, timeoutMs = 20_000) =>
      waitFor(() => invalid.find(match), 'an invalid-message report', timeoutMs),
    async stop() {
      await coordinator.stop();
      await client.close();
      await bus.close();
      await nats.stop();
      await rm(workspaceRoot, { recursive: true, force: true });
    },
  };
}

/**
 * The events one message on a task's events subject holds, read as every Troupe reader reads them (`eventsOf`): the
 * event on its own subject, or each of a batch's, in order. Throws on a message that is neither.
 */
export function eventsInMessage(msg: { data: Uint8Array; subject: string }): TroupeEvent[] {
  const parsed = eventsOfMessage(msg.data, msg.subject);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.value;
}

/** Publishes a task the way any NATS client can: a plain publish on troupe.tasks.<pipeline>. */
export function publishTask(h: Harness, pipeline: string, payload: unknown): void {
  h.client.publish(subjects.task(pipeline), typeof payload === 'string' ? payload : JSON.stringify(payload));
}

export const kinds = (events: TroupeEvent[]) => events.map((e) => e.kind);

/** The events of one kind, typed. */
export const ofKind = <K extends TroupeEvent['kind']>(events: TroupeEvent[], kind: K): EventOf<K>[] =>
  events.filter((e): e is EventOf<K> => e.kind === kind);

/**
 * The events as facts: each id once, the first copy kept. A live subscriber hears a fact again when it is published
 * again (a restored task's pause and told messages, a step run again after a crash); `EVENTS` stores it once.
 */
export const facts = (events: TroupeEvent[]): TroupeEvent[] => {
  const seen = new Set<string>();
  return events.filter((e) => !seen.has(e.id) && seen.add(e.id));
};

/** Resolves once the task has an event of this kind. */
export async function eventOf(
  h: Harness,
  taskId: string,
  kind: TroupeEvent['kind'],
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!kinds(h.eventsOf(taskId)).includes(kind)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${kind} of task ${taskId}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Resolves with what `find` returns once it returns something, looking every 20 ms; fails after `timeoutMs`
 * (generous: CI machines are shared).
 */
export async function found<T>(
  find: () => T | undefined,
  what = 'a condition',
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let value = find(); ; value = find()) {
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves once `check` holds (see {@link found}). */
export async function waitUntil(check: () => boolean, what?: string, timeoutMs?: number): Promise<void> {
  await found(() => (check() ? true : undefined), what, timeoutMs);
}

/** A second coordinator on the harness's server and workspaces: the process that comes up after a restart. */
export async function startSecondCoordinator(
  h: Harness,
  fixtures: string[],
  { eventBatch, ...options }: { maxDeliver?: number; eventBatch?: boolean } = {},
): Promise<{ coordinator: Coordinator; stop(): Promise<void> }> {
  const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
  const bus = await NatsBus.connect({
    servers: h.nats.url,
    name: 'second-coordinator',
    logger,
    ...(eventBatch === undefined ? {} : { eventBatch }),
  });
  const registry = builtinTools();
  const coordinator = await startCoordinator({
    bus,
    pipelines: await Promise.all(
      fixtures.map((f) => loadPipeline(fixturePath(f), { toolNames: registry.names() })),
    ),
    logger,
    workspaceRoot: h.workspaceRoot,
    registry,
    ...options,
  });
  return {
    coordinator,
    async stop() {
      await coordinator.stop();
      await bus.close();
    },
  };
}

/**
 * Waiting for something the test hears about: `notify()` on every new message, `waitFor(find)` resolves with
 * what `find` returns once it returns something, or rejects after `timeoutMs` naming `what`.
 */
export function waiter() {
  const listeners = new Set<() => void>();
  return {
    notify() {
      for (const listener of listeners) listener();
    },
    waitFor<T>(find: () => T | undefined, what: string, timeoutMs = 60_000): Promise<T> {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = find();
          if (found === undefined) return;
          listeners.delete(check);
          clearTimeout(timer);
          resolve(found);
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
  };
}
