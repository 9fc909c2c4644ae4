import { eventsAfter, followTaskEvents } from '@troupe/client';
import { ClientMessage, parseMessage } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import type { FastifyBaseLogger } from 'fastify';
import type { WebSocket } from 'ws';
import type { GatewayActions } from './actions.ts';
import { AgUiMapper } from './agui.ts';
import { AuthRefusal, type Principal } from './auth.ts';
import { answerTo } from './errors.ts';
import { GatewayError } from './gatewayError.ts';
import type { StreamQuota } from './streamQuota.ts';
import { isQueued } from './taskView.ts';

/** How many tasks one connection may follow at once. */
export const MAX_SUBSCRIPTIONS = 100;

/**
 * One client's WebSocket: it follows the tasks it subscribes to (each as the SSE endpoint streams them: every event
 * with its stream sequence, then `end` after the task's final event), and submits, cancels, pauses, resumes, tells,
 * restarts, forks, approves, denies and answers with the same checks as the HTTP routes. Each request is answered with a `reply` carrying the client's
 * `id`; a message that is not one of these gets an `error`, and the connection stays open.
 */
export class WsSession {
  readonly #socket: WebSocket;
  readonly #who: Principal;
  readonly #actions: GatewayActions;
  readonly #bus: JetStreamBus;
  readonly #log: FastifyBaseLogger;
  readonly #quota: StreamQuota;
  readonly #following = new Map<string, AbortController>();
  #closed = false;

  constructor(
    socket: WebSocket,
    who: Principal,
    actions: GatewayActions,
    bus: JetStreamBus,
    log: FastifyBaseLogger,
    quota: StreamQuota,
  ) {
    this.#socket = socket;
    this.#who = who;
    this.#actions = actions;
    this.#bus = bus;
    this.#log = log;
    this.#quota = quota;
    socket.on('message', (data, isBinary) => {
      if (isBinary) {
        void this.#send({
          type: 'error',
          error: { code: 'invalid_message', message: 'send JSON text, not binary' },
        });
        return;
      }
      void this.#receive(data.toString());
    });
    socket.on('close', () => {
      this.#closed = true;
      for (const stop of this.#following.values()) stop.abort();
      this.#following.clear();
    });
  }

  /** Ends the connection with a close code and the reason (cut to the 123 bytes a close frame holds). */
  close(code: number, reason: string): void {
    let cut = reason;
    while (Buffer.byteLength(cut) > 123) cut = `${cut.slice(0, cut.length - 2)}…`;
    this.#socket.close(code, cut);
  }

  async #receive(text: string): Promise<void> {
    const parsed = parseMessage(ClientMessage, text);
    if (!parsed.ok) {
      const problems = parsed.issues.map((i) => `${i.path || 'message'}: ${i.message}`).join('; ');
      await this.#send({
        type: 'error',
        error: { code: 'invalid_message', message: problems || parsed.reason },
      });
      return;
    }
    const message = parsed.value;
    try {
      const result = await this.#act(message);
      await this.#send({ type: 'reply', ...(message.id ? { id: message.id } : {}), ok: true, result });
    } catch (error) {
      await this.#send({
        type: 'reply',
        ...(message.id ? { id: message.id } : {}),
        ok: false,
        error: errorBody(error),
      });
      if (error instanceof AuthRefusal) {
        this.#log.warn(
          { token: this.#who.name, type: message.type, reason: error.message },
          `refused ${message.type}: ${error.message}`,
        );
      } else if (errorBody(error).code === 'internal') {
        this.#log.error({ err: error, type: message.type }, 'websocket request failed');
      }
    }
  }

  async #act(message: ClientMessage): Promise<unknown> {
    const who = this.#who;
    switch (message.type) {
      case 'subscribe':
        return this.#subscribe(message);
      case 'unsubscribe': {
        const following = this.#following.get(message.taskId);
        following?.abort();
        this.#following.delete(message.taskId);
        return { taskId: message.taskId, subscribed: false };
      }
      case 'submit':
        return (
          await this.#actions.submit(who, message.pipeline, message.task, {
            ...(message.idempotencyKey ? { idempotencyKey: message.idempotencyKey } : {}),
          })
        ).view;
      case 'cancel':
        return this.#actions.cancel(who, message.taskId, message.reason);
      case 'pause':
        return this.#actions.pause(who, message.taskId, {
          ...(message.reason ? { reason: message.reason } : {}),
          ...by(message),
        });
      case 'resume':
        return this.#actions.resume(who, message.taskId, by(message));
      case 'tell':
        return this.#actions.tell(
          who,
          message.taskId,
          { text: message.text, ...by(message) },
          keyed(message),
        );
      case 'restart':
        return this.#actions.restart(
          who,
          message.taskId,
          {
            from: message.from,
            ...(message.newest ? { newest: true } : {}),
            ...by(message),
          },
          keyed(message),
        );
      case 'fork': {
        const { at, input, set, newest } = message;
        return this.#actions.fork(
          who,
          message.taskId,
          {
            at,
            ...(input ? { input } : {}),
            ...(set ? { set } : {}),
            ...(newest ? { newest: true } : {}),
            ...by(message),
          },
          keyed(message),
        );
      }
      case 'approve':
        return this.#actions.decide(who, message.requestId, { decision: 'allow', ...by(message) });
      case 'deny':
        return this.#actions.decide(who, message.requestId, {
          decision: 'deny',
          reason: message.reason,
          ...by(message),
        });
      case 'answer':
        return this.#actions.decide(who, message.requestId, { answer: message.answer, ...by(message) });
    }
  }

  async #subscribe(message: Extract<ClientMessage, { type: 'subscribe' }>): Promise<unknown> {
    const { taskId } = message;
    if (this.#following.has(taskId)) return { taskId, subscribed: true };
    if (this.#following.size >= MAX_SUBSCRIPTIONS) {
      throw new GatewayError(
        'too_many_subscriptions',
        429,
        `a connection follows at most ${MAX_SUBSCRIPTIONS} tasks`,
      );
    }
    // Each followed task holds a consumer on the NATS server: counted against the token's cap across connections.
    const release = this.#quota.take(this.#who, 'consumers');
    // Taken before anything is awaited: subscribes sent together count against the cap, and follow a task once.
    const stop = new AbortController();
    this.#following.set(taskId, stop);
    // A task still queued is followed too: its events come once a coordinator takes it.
    let record: Awaited<ReturnType<GatewayActions['followable']>>;
    try {
      record = await this.#actions.followable(this.#who, taskId);
    } catch (error) {
      if (this.#following.get(taskId) === stop) this.#following.delete(taskId);
      release();
      throw error;
    }
    // Closed or unsubscribed meanwhile: nothing is started for it.
    if (stop.signal.aborted || this.#closed) {
      release();
      return { taskId, subscribed: false };
    }
    // A task that has ended with nothing after `after`: no event will come, so the subscription ends at once.
    if (
      !isQueued(record) &&
      record.status !== 'running' &&
      message.after !== undefined &&
      (await eventsAfter(this.#bus, record, message.after)) === 0
    ) {
      this.#following.delete(taskId);
      release();
      setImmediate(() => void this.#send({ type: 'end', taskId }));
      return { taskId, subscribed: true };
    }
    const mapper =
      message.format === 'ag-ui' ? new AgUiMapper(record.metadata?.session ?? record.taskId) : undefined;
    followTaskEvents(this.#bus, record, {
      ...(message.after === undefined ? {} : { after: message.after }),
      signal: stop.signal,
      onEvent: async ({ seq, event }) => {
        if (!mapper) return this.#send({ type: 'event', taskId, seq, event });
        const mapped = mapper.map(event);
        for (const [i, agui] of mapped.entries()) {
          await this.#send({
            type: 'event',
            taskId,
            format: 'ag-ui',
            ...(i === mapped.length - 1 ? { seq } : {}),
            event: agui,
          });
        }
      },
    })
      .then(async () => {
        if (!stop.signal.aborted) await this.#send({ type: 'end', taskId });
      })
      .catch(async (error: unknown) => {
        this.#log.warn({ err: error, taskId }, 'websocket event stream ended by an error');
        await this.#send({ type: 'end', taskId, error: errorBody(error) });
      })
      .finally(() => {
        if (this.#following.get(taskId) === stop) this.#following.delete(taskId);
        release();
      });
    return { taskId, subscribed: true };
  }

  /** Sends one message, and waits until the socket has taken it: a slow client holds back only its own streams. */
  #send(message: unknown): Promise<void> {
    if (this.#socket.readyState !== this.#socket.OPEN) return Promise.resolve();
    return new Promise((resolve) => {
      this.#socket.send(JSON.stringify(message), () => resolve());
    });
  }
}

const by = (message: { by?: string | undefined }) => (message.by === undefined ? {} : { by: message.by });
/** A restart's or fork's idempotency key, as the actions take it: a retry makes no second task. */
const keyed = (message: { idempotencyKey?: string | undefined }) =>
  message.idempotencyKey === undefined ? {} : { idempotencyKey: message.idempotencyKey };

/** An error as a reply's `error`: the code and message the HTTP routes would give. */
function errorBody(error: unknown): { code: string; message: string } {
  const answer = answerTo(error);
  return answer
    ? { code: answer.code, message: answer.message }
    : { code: 'internal', message: 'internal error' };
}
