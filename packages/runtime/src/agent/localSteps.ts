import type { AgentStepReply, AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { CallerCheckpoint } from '../durable/callerCheckpoint.ts';
import { type Clock, systemClock } from '../events/clock.ts';
import type { Logger } from '../logging/logger.ts';
import {
  type MessageLogLevel,
  type MessageMeta,
  messageLogFields,
  messageLogLine,
  replyMeta,
} from '../logging/messageLog.ts';
import { holdableTimer, type TimeoutHold } from '../transport/heartbeatRequest.ts';
import { TransportError } from '../transport/transportError.ts';
import type { HostedAgent } from './remoteAgent.ts';
import { failedReply } from './stepReply.ts';
import type { LocalDelivery } from './stepRequesters.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

/** A step taken in this process: its reply, and its stop. */
export interface LocalStepCall {
  /** Never rejects: a failure is a reply, as over NATS. */
  readonly reply: Promise<AgentStepReply>;
  /**
   * The workflow left the step (cancelled, timed out, its task ended): the run stops as for `aborted` (unless a
   * resend over NATS joined it), and `reply` is an `aborted` failure if it had not settled.
   */
  cancel(): void;
}

/** What a step taken in this process tells its caller while it runs. */
export interface LocalStepHooks {
  /**
   * What a heartbeat would say (whom the step waits on, a model call that lasted), only when it changes: no periodic
   * heartbeat is sent, as the caller is in this process and cannot lose the step's run without losing its own.
   */
  onActivity(heartbeat: StepHeartbeat): void;
  /**
   * The caller's checkpoint, which records the step's output (and those of the steps before it): a run this take starts
   * writes nothing to its journal before every checkpoint the caller made so far is stored, and leaves its final model
   * reply to that checkpoint (see `StepJournal.forLocalStep`). Without it, the run journals as one from NATS.
   */
  checkpoint?: CallerCheckpoint | undefined;
}

/**
 * Steps of agents this process serves, run without NATS when a host here has room. A step taken this way goes the
 * same path as one delivered over NATS (`StepsInFlight.take`): it joins a run of the same step id under way, gets
 * a reply given lately, hears the steering it missed, and runs with the same journal, events, budgets, permissions,
 * workspace and time limit. Only the delivery differs: no inbox, no heartbeats.
 */
export interface LocalSteps {
  /**
   * Takes the step here, or returns undefined: no host here serves `request.agent` at `request.version`, or it is
   * full or stopping. The caller then sends the step over NATS, where any worker may take it.
   */
  tryTake(request: AgentStepRequest, hooks: LocalStepHooks): LocalStepCall | undefined;
}

/** How a workflow waits for a step taken in this process: as `requestWithHeartbeats` waits for one sent over NATS. */
export interface LocalRequestOptions {
  /** How long to wait for the reply in all, less the time held; then the run is cancelled and this fails `timeout`. */
  timeoutMs: number;
  /** While held, `timeoutMs` stops running (see `requestWithHeartbeats`). */
  hold?: TimeoutHold;
  /** Aborted, the run is cancelled and this fails `aborted`. */
  signal?: AbortSignal;
  /** What a heartbeat would say, when it changes. */
  onHeartbeat?: (heartbeat: StepHeartbeat) => void;
  clock?: Clock;
  /** Where the step's two lines go: its request's and its reply's, as over NATS (see {@link LocalStepLog}). */
  log?: LocalStepLog;
  /** The workflow's checkpoint, which records the step's output (see {@link LocalStepHooks.checkpoint}). */
  checkpoint?: CallerCheckpoint;
}

/**
 * The log lines of a step taken in this process, in place of the four a step over NATS writes (its request sent and
 * received, its reply sent and received): one as it is taken (`→ <subject>`) and one as it is answered (`← <subject>`,
 * with `ok`, the failure's `code` and `durationMs`), with the fields of the NATS lines and `local: true`.
 */
export interface LocalStepLog {
  logger: Logger;
  /** The level the NATS lines would have (the bus's `messageLogLevel`). */
  level: MessageLogLevel;
  /** The subject the step would have gone on over NATS. */
  subject: string;
  /** What the request's line says (its reply's is made from it, as over NATS: see `replyMeta`). */
  meta: MessageMeta;
}

/**
 * The step taken in this process, if a host here takes it, as a promise of its reply that fails as
 * `requestWithHeartbeats` does (a {@link TransportError}: `timeout`, `aborted`); undefined when no host here takes
 * it, so the caller sends it over NATS.
 */
export function requestLocally(
  local: LocalSteps,
  request: AgentStepRequest,
  options: LocalRequestOptions,
): Promise<AgentStepReply> | undefined {
  if (options.signal?.aborted) return undefined;
  let heard = (_heartbeat: StepHeartbeat) => {};
  const call = local.tryTake(request, {
    onActivity: (heartbeat) => heard(heartbeat),
    ...(options.checkpoint ? { checkpoint: options.checkpoint } : {}),
  });
  if (!call) return undefined;
  const clock = options.clock ?? systemClock;
  const { log } = options;
  const takenAt = clock.now();
  if (log) logTaken(log);
  return new Promise<AgentStepReply>((resolve, reject) => {
    let done = false;
    let unhold: (() => void) | undefined;
    const finish = (error: TransportError | undefined, reply?: AgentStepReply) => {
      if (done) return;
      done = true;
      overall.stop();
      unhold?.();
      options.signal?.removeEventListener('abort', onAbort);
      if (log)
        logAnswered(
          log,
          error?.code ?? (reply?.ok === false ? reply.error.code : undefined),
          clock.now() - takenAt,
        );
      if (error) {
        call.cancel();
        reject(error);
      } else resolve(reply as AgentStepReply);
    };
    const where = `${request.pipeline}/${request.agent} (in this process)`;
    const onAbort = () =>
      finish(new TransportError('aborted', `step ${request.stepId} for ${where} was aborted`));
    const overall = holdableTimer(clock, options.timeoutMs, () =>
      finish(new TransportError('timeout', `no reply from ${where} within ${options.timeoutMs} ms`)),
    );
    if (options.hold) {
      if (options.hold.held) overall.hold();
      unhold = options.hold.listen((held) => (held ? overall.hold() : overall.release()));
    }
    options.signal?.addEventListener('abort', onAbort, { once: true });
    heard = (heartbeat) => {
      if (!done) options.onHeartbeat?.(heartbeat);
    };
    void call.reply.then((reply) => finish(undefined, reply));
  });
}

const IN_THIS_PROCESS = '(in this process)';

function logTaken(log: LocalStepLog): void {
  if (!log.logger.isLevelEnabled(log.level)) return;
  log.logger[log.level](
    { ...messageLogFields('out', log.subject, log.meta), local: true },
    `${messageLogLine('out', log.subject)} ${IN_THIS_PROCESS}`,
  );
}

/** The reply's line: `code` undefined for a step that succeeded. */
function logAnswered(log: LocalStepLog, code: string | undefined, durationMs: number): void {
  if (!log.logger.isLevelEnabled(log.level)) return;
  const outcome = code === undefined ? { ok: true } : { ok: false, code };
  log.logger[log.level](
    { ...messageLogFields('in', log.subject, replyMeta(log.meta)), local: true, ...outcome, durationMs },
    `${messageLogLine('in', log.subject)} ${IN_THIS_PROCESS}: ${code ?? 'ok'} in ${durationMs} ms`,
  );
}

/**
 * Hands `request` to `steps` as a delivery in this process, for `agent`. With `TROUPE_FREEZE_LOCAL=1` (set by the
 * local step tests) the request and the reply are frozen: the host and the workflow share them, and neither may
 * change them.
 */
export function takeLocally(
  steps: StepsInFlight,
  agent: HostedAgent,
  request: AgentStepRequest,
  hooks: LocalStepHooks,
): LocalStepCall {
  if (process.env.TROUPE_FREEZE_LOCAL === '1') deepFreeze(request);
  const delivery = new LocalStepDelivery(request, hooks);
  // Taken once what the caller does now is done, as a delivery over NATS would be: the workflow's own events for the
  // step (`step.started`, say) go out before the step's.
  queueMicrotask(() => steps.take(delivery, agent));
  return new LocalCall(steps, delivery);
}

/**
 * A step handed to a host in this process, as the host takes it: its first reply settles `answered`, and what its
 * heartbeats would say reaches the workflow until then. Its parts are methods, not closures: a parked step keeps one
 * object here.
 */
class LocalStepDelivery implements LocalDelivery {
  readonly value: AgentStepRequest;
  readonly answered: Promise<AgentStepReply>;
  left?: boolean;
  readonly #hooks: LocalStepHooks;
  /** Undefined once the step is answered. */
  #settle: ((reply: AgentStepReply) => void) | undefined;

  constructor(request: AgentStepRequest, hooks: LocalStepHooks) {
    this.value = request;
    this.#hooks = hooks;
    let settle: (reply: AgentStepReply) => void = () => {};
    this.answered = new Promise<AgentStepReply>((resolve) => (settle = resolve));
    this.#settle = settle;
  }

  get subject(): string {
    return `local:${this.value.pipeline}.${this.value.agent}`;
  }

  get checkpoint(): CallerCheckpoint | undefined {
    return this.#hooks.checkpoint;
  }

  get settled(): boolean {
    return this.#settle === undefined;
  }

  respond(payload: unknown): void {
    const settle = this.#settle;
    if (!settle) return;
    this.#settle = undefined;
    if (process.env.TROUPE_FREEZE_LOCAL === '1') deepFreeze(payload);
    settle(payload as AgentStepReply);
  }

  activity(heartbeat: StepHeartbeat): void {
    if (this.#settle) this.#hooks.onActivity(heartbeat);
  }
}

/** The workflow's side of a step taken in this process: its reply, and its way to leave the step. */
class LocalCall implements LocalStepCall {
  readonly #steps: StepsInFlight;
  readonly #delivery: LocalStepDelivery;

  constructor(steps: StepsInFlight, delivery: LocalStepDelivery) {
    this.#steps = steps;
    this.#delivery = delivery;
  }

  get reply(): Promise<AgentStepReply> {
    return this.#delivery.answered;
  }

  cancel(): void {
    const delivery = this.#delivery;
    if (delivery.settled) return;
    this.#steps.leave(delivery);
    const { stepId } = delivery.value;
    delivery.respond(failedReply(stepId, 'aborted', `step ${stepId} was left by its workflow`));
  }
}

function deepFreeze(value: unknown): void {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return;
  Object.freeze(value);
  for (const inner of Object.values(value)) deepFreeze(inner);
}
