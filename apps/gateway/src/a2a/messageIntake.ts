import { randomUUID } from 'node:crypto';
import { type Message, Role, type SendMessageRequest, type Task } from '@a2a-js/sdk';
import { RequestMalformedError, UnsupportedOperationError } from '@a2a-js/sdk/errors';
import { CLIENT_WAIT, OperationError, PipelineRegistry } from '@troupe/client';
import { SessionId, type WorkflowRecord } from '@troupe/protocol';
import { authorize } from '../auth.ts';
import { decisionOf } from './inputAnswer.ts';
import type { A2aCaller, A2aServices } from './pipelineAgent.ts';
import { openPushConfigs, pushCall } from './pushConfigCalls.ts';
import { taskInputOf } from './taskInput.ts';
import type { TaskLookup } from './taskLookup.ts';
import { type A2aTaskRef, rejectedTask } from './taskMapping.ts';
import { refOf } from './taskReader.ts';

/** A message that started or answered a task. */
export type Begun =
  | { rejected: Task }
  | {
      ref: A2aTaskRef;
      pipeline: string;
      /** The task's record when it existed before this message (an answer to it). */
      record?: WorkflowRecord;
      /** The request this message answered: the task has not settled again until it is no longer pending. */
      answered?: string;
      message: Message;
    };

/**
 * What a SendMessage's message does: starts a task in the message's context (a gateway session, opened when new;
 * the same message sent again finds its task rather than starting another), or answers what the task it names asks.
 */
export class MessageIntake {
  readonly #services: A2aServices;
  readonly #caller: A2aCaller;
  readonly #lookup: TaskLookup;

  constructor(services: A2aServices, caller: A2aCaller, lookup: TaskLookup) {
    this.#services = services;
    this.#caller = caller;
    this.#lookup = lookup;
  }

  /** Starts the task a message asks for, or answers the task it names; a task the service refuses is REJECTED. */
  async begin(params: SendMessageRequest): Promise<Begun> {
    const message = params.message;
    if (!message) throw new RequestMalformedError('message: a SendMessage needs a message');
    if (message.messageId === '') throw new RequestMalformedError('message.messageId: must not be empty');
    if (message.role === Role.ROLE_AGENT) {
      throw new RequestMalformedError(
        'message.role: a client sends ROLE_USER messages; ROLE_AGENT is the agent’s',
      );
    }
    const push = params.configuration?.taskPushNotificationConfig;
    if (push) {
      // A config that would be refused is refused before the task starts, not after.
      const configs = await openPushConfigs(this.#services);
      if (push.taskId && push.taskId !== message.taskId) {
        throw new RequestMalformedError('configuration.taskPushNotificationConfig.taskId: leave it empty');
      }
      await pushCall(async () => configs.check(push));
    }
    if (message.taskId) return this.#answer(message, params.tenant);
    const pipeline = this.#lookup.pipelineOf(params.tenant);
    if (pipeline === undefined) {
      throw new RequestMalformedError(
        'this endpoint serves every pipeline: name one in the request’s tenant, or use the pipeline’s own card',
      );
    }
    const { who } = this.#caller;
    authorize(who, 'submit', pipeline);
    const given = taskInputOf(message);
    const contextId = message.contextId || undefined;
    if (contextId !== undefined && !SessionId.safeParse(contextId).success) {
      throw new RequestMalformedError(
        `contextId: ${JSON.stringify(contextId)} is not a context this agent can take (letters, digits, _ and -, at most 48)`,
      );
    }
    const reject = (reason: string) => ({
      rejected: rejectedTask({ taskId: randomUUID(), contextId: contextId ?? randomUUID() }, reason, message),
    });
    const registry = await PipelineRegistry.open(this.#services.bus, CLIENT_WAIT);
    if (!(await registry.get(pipeline))) return reject(`no pipeline named ${pipeline} is served here`);
    if (given.goal === '') {
      return reject('the message has no text: its text parts are the goal of the task it starts');
    }
    // The first message of a conversation opens a session named after it (and the token): sent again, by a client
    // that lost the answer, it finds that session and its task rather than starting another.
    const first = contextId === undefined;
    const session = await this.#session(
      pipeline,
      contextId ?? this.#services.ids.fromKey(who.name, `a2a\n${pipeline}\n${message.messageId}`),
    );
    const sentBefore = async (): Promise<Begun | undefined> => {
      const earlier = await this.#sentBefore(session, message.messageId, first);
      if (!earlier) return undefined;
      const ref = { taskId: earlier.taskId, contextId: session };
      return { ref, pipeline, message, ...(earlier.record ? { record: earlier.record } : {}) };
    };
    const again = await sentBefore();
    if (again) return again;
    try {
      const { view } = await this.#services.sessions.say(who, session, {
        goal: given.goal,
        ...(given.input ? { input: given.input } : {}),
        metadata: { a2aMessageId: message.messageId },
      });
      return { ref: { taskId: view.taskId, contextId: session }, pipeline, message };
    } catch (error) {
      if (OperationError.is(error, 'invalid_request') || OperationError.is(error, 'too_large')) {
        return reject(`the task was refused: ${error.message}`);
      }
      // The same message sent twice at once: the one that lost the race answers with the winner's task.
      if (OperationError.is(error, 'conflict')) {
        const raced = await sentBefore();
        if (raced) return raced;
      }
      throw error;
    }
  }

  /**
   * The task a message already started in this session: the turn whose task records the message's id, or (in a
   * session opened for the message itself) its first turn, whose task may not have been taken up yet.
   */
  async #sentBefore(
    sessionId: string,
    messageId: string,
    openedForIt: boolean,
  ): Promise<{ taskId: string; record: WorkflowRecord | undefined } | undefined> {
    const { session, tasks } = await this.#services.sessions.read(this.#caller.who, sessionId);
    const at = openedForIt ? 0 : tasks.findIndex((r) => r?.metadata?.a2aMessageId === messageId);
    const turn = at >= 0 ? session.turns[at] : undefined;
    if (!turn) return undefined;
    return { taskId: turn.taskId, record: tasks[at] };
  }

  /** The client's answer to what its task asks, decided as the token's holder (who needs the approve scope). */
  async #answer(message: Message, tenant: string): Promise<Begun> {
    const record = await this.#lookup.record(message.taskId, tenant);
    const ref = refOf(record);
    if (message.contextId && message.contextId !== ref.contextId) {
      throw new RequestMalformedError(
        `contextId: task ${record.taskId} is in context ${ref.contextId}, not ${message.contextId}`,
      );
    }
    if (record.status !== 'running') {
      throw new UnsupportedOperationError(
        `task ${record.taskId} has ended (${record.status}) and takes no more messages; send a new message ` +
          `with contextId ${ref.contextId} to follow it up`,
      );
    }
    const pending = await this.#services.actions.approvals(this.#caller.who, { taskId: record.taskId });
    if (pending.length === 0) return this.#tell(message, record, ref);
    const decision = decisionOf(message, pending);
    await this.#services.actions.decide(this.#caller.who, decision.requestId, decision.body);
    return { ref, pipeline: record.pipeline, record, answered: decision.requestId, message };
  }

  /**
   * A message to a task that is working and asks nothing: told to its agent at work, which reads it before its next
   * model call (the next agent step does when none is at work), as `troupe tell` does. Text only: a task's input is
   * set when it starts.
   */
  async #tell(message: Message, record: WorkflowRecord, ref: A2aTaskRef): Promise<Begun> {
    const given = taskInputOf(message);
    if (given.input !== undefined || given.goal === '') {
      throw new RequestMalformedError(
        `task ${record.taskId} is working: a message to it is told to its agent as text, so send text parts only`,
      );
    }
    // Its messageId is the key: a client sending the message again (its answer lost) tells the task once.
    await this.#services.actions.tell(
      this.#caller.who,
      record.taskId,
      { text: given.goal },
      { idempotencyKey: `a2a\n${message.messageId}` },
    );
    return { ref, pipeline: record.pipeline, record, message };
  }

  /** The session a new task runs in: the context named (opened when this is its first task), else a new one. */
  async #session(pipeline: string, contextId: string | undefined): Promise<string> {
    const { sessions } = this.#services;
    const { who } = this.#caller;
    if (contextId === undefined) return (await sessions.open(who, pipeline)).id;
    try {
      const { session } = await sessions.read(who, contextId);
      if (session.pipeline !== pipeline) {
        throw new RequestMalformedError(
          `contextId: context ${contextId} belongs to another pipeline; start a new context here`,
        );
      }
      return session.id;
    } catch (error) {
      if (!OperationError.is(error, 'not_found')) throw error;
    }
    try {
      return (await sessions.open(who, pipeline, contextId)).id;
    } catch (error) {
      // Another message opened it first, or it is another pipeline's that this token may not see.
      if (!OperationError.is(error, 'conflict')) throw error;
      const { session } = await sessions.read(who, contextId).catch(() => {
        throw new RequestMalformedError(
          `contextId: context ${contextId} cannot be used here; start a new one`,
        );
      });
      if (session.pipeline !== pipeline) {
        throw new RequestMalformedError(
          `contextId: context ${contextId} cannot be used here; start a new one`,
        );
      }
      return session.id;
    }
  }
}
