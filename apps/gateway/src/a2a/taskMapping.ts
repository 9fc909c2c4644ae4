import {
  type Artifact,
  type Message,
  type Part,
  Role,
  type StreamResponse,
  type Task,
  TaskState,
  type TaskStatus,
} from '@a2a-js/sdk';
import type { TroupeEvent } from '@troupe/protocol';

/** Which A2A task a Troupe task is: the same id, and the context (the gateway session) it belongs to. */
export interface A2aTaskRef {
  taskId: string;
  contextId: string;
}

/** The metadata key of the data part an INPUT_REQUIRED status carries: what is asked and how to answer. */
export const ASKED_KEY = 'troupe.asked';

/** The JSON Schema of an answer to an approval, sent in a data part (text `approve` / `deny <reason>` works too). */
export const APPROVAL_ANSWER_SCHEMA = {
  type: 'object',
  properties: {
    decision: { enum: ['approve', 'deny'] },
    reason: { type: 'string', description: 'why; required with deny, the agent is told' },
    requestId: { type: 'string', description: 'which request, when several are pending' },
  },
  required: ['decision'],
} as const;

/** The JSON Schema of an answer to a question when its step declares none: text, or `{ answer }` in a data part. */
export const TEXT_ANSWER_SCHEMA = { type: 'string' } as const;

/** One approval or question a task waits on, as the INPUT_REQUIRED status shows it. */
export interface AskedRequest {
  kind: 'approval' | 'question';
  requestId: string;
  agent: string;
  /** What is asked, in words. */
  prompt: string;
  tool?: string;
  arguments?: string;
  /**
   * When it runs out, as it was asked (an approval's `approval.requested`). Gone once its task is paused: the request
   * does not run out while held, and on the resume its asker sets a new expiry on its record (`GET /v1/approvals`),
   * which no event carries.
   */
  expiresAt?: string;
  /** Its task is paused: it does not run out and stays answerable (its record's `held` says the time it has left). */
  held?: true;
  /** The JSON Schema an answer must match. */
  answerSchema: unknown;
}

const TERMINAL = new Set([
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
]);

/** Whether a task in this state will change no more (A2A's terminal states). */
export const isTerminal = (state: TaskState | undefined): boolean =>
  state !== undefined && TERMINAL.has(state);

export const textPart = (text: string): Part => ({
  content: { $case: 'text', value: text },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});

export const dataPart = (value: unknown, metadata?: Record<string, unknown>): Part => ({
  content: { $case: 'data', value },
  metadata,
  filename: '',
  mediaType: 'application/json',
});

export function agentMessage(
  ref: A2aTaskRef,
  messageId: string,
  parts: Part[],
  role: Role = Role.ROLE_AGENT,
): Message {
  return {
    messageId,
    contextId: ref.contextId,
    taskId: ref.taskId,
    role,
    parts,
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

/**
 * A task's A2A form, rebuilt from its Troupe events in the order `EVENTS` stored them: fold each in with
 * {@link apply}, which answers with what changed as `StreamResponse`s. Nothing here is kept anywhere but in the
 * fold: the events are the task's truth, so any gateway rebuilds the same task from them.
 */
export class TaskFold {
  readonly ref: A2aTaskRef;
  #status: TaskStatus;
  readonly #history: Message[] = [];
  readonly #artifacts: Artifact[] = [];
  /** Approvals and questions asked and not yet answered, by request id, in the order they were asked. */
  readonly #pending = new Map<string, AskedRequest>();
  /** The schemas questions' answers must match, where their step declares one (see {@link expectAnswer}). */
  readonly #answerSchemas = new Map<string, unknown>();
  #pipeline: string | undefined;

  /** `userMessage`: the message that started the task, when it is known before the task's first event. */
  constructor(ref: A2aTaskRef, createdAt?: string, userMessage?: Message) {
    this.ref = ref;
    this.#status = { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: createdAt };
    if (userMessage) this.#history.push(userMessage);
  }

  get state(): TaskState {
    return this.#status.state;
  }

  /** What the task waits on a person for, oldest first. */
  get pending(): readonly AskedRequest[] {
    return [...this.#pending.values()];
  }

  /** Says what a question's answer must match, before its `human.asked` event is folded in (plain text otherwise). */
  expectAnswer(questionId: string, schema: unknown): void {
    this.#answerSchemas.set(questionId, schema);
  }

  /** Folds one event in; answers with the A2A updates it makes (none for events that change nothing A2A shows). */
  apply(event: TroupeEvent): StreamResponse[] {
    // Nothing comes after a terminal state: an event republished late must not reopen the task.
    if (isTerminal(this.#status.state)) return [];
    this.#pipeline ??= event.pipeline;
    const updates: StreamResponse[] = [];
    const status = (state: TaskState, text: string, extra: Part[] = []) => {
      this.#status = {
        state,
        message: agentMessage(this.ref, `${event.id}.status`, [textPart(text), ...extra]),
        timestamp: event.ts,
      };
      updates.push(statusUpdate(this.ref, this.#status, { 'troupe.event': event.kind }));
    };
    const working = (text: string) => {
      // While a person is still asked something, the task stays INPUT_REQUIRED whatever else moves.
      if (this.#pending.size > 0) {
        const asked = this.#asked();
        status(TaskState.TASK_STATE_INPUT_REQUIRED, asked.text, asked.parts);
      } else status(TaskState.TASK_STATE_WORKING, text);
    };
    switch (event.kind) {
      case 'task.accepted': {
        const { goal, metadata } = event.data;
        // A session's earlier turns, which the gateway adds to a follow-up's input, are not the client's to see again.
        const input = Object.fromEntries(
          Object.entries(event.data.input ?? {}).filter(([key]) => !(metadata?.session && key === 'session')),
        );
        const messageId = event.data.metadata?.a2aMessageId ?? `${event.id}.goal`;
        // The client's own message, when the fold began with it, is not told twice.
        if (this.#history.some((m) => m.messageId === messageId)) {
          status(TaskState.TASK_STATE_SUBMITTED, `accepted by pipeline ${event.pipeline}`);
          break;
        }
        this.#history.push(
          agentMessage(
            this.ref,
            messageId,
            [textPart(goal), ...(Object.keys(input).length > 0 ? [dataPart(input)] : [])],
            Role.ROLE_USER,
          ),
        );
        status(TaskState.TASK_STATE_SUBMITTED, `accepted by pipeline ${event.pipeline}`);
        break;
      }
      case 'task.resumed':
        if (event.data.after === 'pause') this.#release();
        working(
          event.data.after === 'pause'
            ? `resumed after a pause${event.data.by ? ` by ${event.data.by}` : ''}, at ${event.data.state}`
            : `resumed at ${event.data.state} (round ${event.data.round})`,
        );
        break;
      // A2A has no paused state: the task is still working, held, and its status says so.
      case 'task.paused':
        this.#hold();
        working(
          `paused${event.data.by ? ` by ${event.data.by}` : ''} at ${event.data.state}${event.data.reason ? `: ${event.data.reason}` : ''}`,
        );
        break;
      case 'task.told':
        this.#history.push(agentMessage(this.ref, event.id, [textPart(event.data.text)], Role.ROLE_USER));
        break;
      case 'step.started':
        working(`agent ${event.data.agent} is working on step ${event.data.step}${itemOf(event.data.item)}`);
        break;
      case 'agent.handoff':
        // The envelope names who hands over to whom; the task itself hands its first step over, and after a
        // parallel or foreach step its join does.
        working(
          event.data.join !== undefined
            ? `the join of step ${event.data.join} hands step ${event.data.step} over to agent ${event.to ?? '?'}`
            : event.from && event.from !== 'task'
              ? `agent ${event.from} hands step ${event.data.step} over to agent ${event.to ?? '?'}`
              : `agent ${event.to ?? '?'} takes step ${event.data.step}`,
        );
        break;
      case 'step.completed':
        working(
          event.data.ok
            ? `agent ${event.data.agent} finished step ${event.data.step}${itemOf(event.data.item)}`
            : `step ${event.data.step} of agent ${event.data.agent} failed: ${event.data.error?.message ?? 'no reason given'}`,
        );
        break;
      case 'approval.requested': {
        const { approvalId, agent, tool, arguments: args, reason, expiresAt } = event.data;
        this.#pending.set(approvalId, {
          kind: 'approval',
          requestId: approvalId,
          agent,
          prompt: `agent ${agent} asks to call ${tool} with ${args} (${reason}): answer approve, or deny with a reason`,
          tool,
          arguments: args,
          expiresAt,
          answerSchema: APPROVAL_ANSWER_SCHEMA,
        });
        this.#ask(event.id, approvalId, status);
        break;
      }
      case 'human.asked': {
        const { questionId, agent, question } = event.data;
        this.#pending.set(questionId, {
          kind: 'question',
          requestId: questionId,
          agent,
          prompt: question,
          answerSchema: this.#answerSchemas.get(questionId) ?? TEXT_ANSWER_SCHEMA,
        });
        this.#ask(event.id, questionId, status);
        break;
      }
      case 'approval.decided': {
        const { approvalId, decision, reason, by, expired } = event.data;
        this.#pending.delete(approvalId);
        const said = expired
          ? `nobody decided in time: denied`
          : `${decision === 'allow' ? 'approve' : 'deny'}${reason ? ` ${reason}` : ''}`;
        this.#history.push(
          agentMessage(
            this.ref,
            `${event.id}.answer`,
            [textPart(said)],
            expired ? Role.ROLE_AGENT : Role.ROLE_USER,
          ),
        );
        working(
          `approval ${approvalId} ${decision === 'allow' ? 'allowed' : 'denied'}${by ? ` by ${by}` : ''}`,
        );
        break;
      }
      case 'human.answered': {
        const { questionId, answer, by } = event.data;
        this.#pending.delete(questionId);
        this.#history.push(agentMessage(this.ref, `${event.id}.answer`, [textPart(answer)], Role.ROLE_USER));
        working(`question ${questionId} answered${by ? ` by ${by}` : ''}`);
        break;
      }
      case 'task.completed': {
        const artifact = outputArtifact(this.ref, event.data.output);
        this.#artifacts.splice(0, this.#artifacts.length, artifact);
        updates.push({
          payload: {
            $case: 'artifactUpdate',
            value: {
              taskId: this.ref.taskId,
              contextId: this.ref.contextId,
              artifact,
              append: false,
              lastChunk: true,
              metadata: undefined,
            },
          },
        });
        this.#pending.clear();
        status(
          TaskState.TASK_STATE_COMPLETED,
          event.data.approved === false
            ? 'completed at its review bound without approval'
            : `completed in ${event.data.rounds} round(s)`,
        );
        break;
      }
      case 'task.failed':
        this.#pending.clear();
        status(TaskState.TASK_STATE_FAILED, `failed (${event.data.reason}): ${event.data.message}`, [
          dataPart({ reason: event.data.reason, message: event.data.message, step: event.data.step }),
        ]);
        break;
      case 'task.cancelled':
        this.#pending.clear();
        status(
          TaskState.TASK_STATE_CANCELED,
          `cancelled${event.data.reason ? `: ${event.data.reason}` : ''}`,
        );
        break;
      default:
        break;
    }
    return updates;
  }

  /**
   * The task as A2A shows it: `historyLength` of its messages (all when absent, none at 0), its artifacts unless
   * left out.
   */
  task(options: { historyLength?: number | undefined; includeArtifacts?: boolean } = {}): Task {
    const { historyLength, includeArtifacts = true } = options;
    const history =
      historyLength === undefined
        ? [...this.#history]
        : historyLength <= 0
          ? []
          : this.#history.slice(-historyLength);
    return {
      id: this.ref.taskId,
      contextId: this.ref.contextId,
      status: this.#status,
      artifacts: includeArtifacts ? [...this.#artifacts] : [],
      history,
      metadata: this.#pipeline ? { pipeline: this.#pipeline } : undefined,
    };
  }

  /**
   * The task is paused: what it waits on is held, its expiry as asked no longer the time it runs out. The expiry it
   * gets at the resume is written by its asker on its record only, from the time it had left when the asker heard
   * the pause; worked out here from the events' times it could differ from the record's, so none is stated.
   */
  #hold() {
    for (const [id, request] of this.#pending) {
      const { expiresAt: _asked, ...rest } = request;
      this.#pending.set(id, { ...rest, held: true });
    }
  }

  /** The task is resumed after a pause: its requests are no longer held (their new expiry is on their records). */
  #release() {
    for (const [id, request] of this.#pending) {
      const { held: _held, ...rest } = request;
      this.#pending.set(id, rest);
    }
  }

  /** A new request: in the history as the agent's message, and the status INPUT_REQUIRED with all that is pending. */
  #ask(eventId: string, requestId: string, status: (state: TaskState, text: string, parts: Part[]) => void) {
    const one = this.#asked(requestId);
    this.#history.push(agentMessage(this.ref, `${eventId}.ask`, [textPart(one.text), ...one.parts]));
    const all = this.#asked();
    status(TaskState.TASK_STATE_INPUT_REQUIRED, all.text, all.parts);
  }

  /** What an INPUT_REQUIRED says: every pending request (or only `only`), in words and as a data part. */
  #asked(only?: string): { text: string; parts: Part[] } {
    const asked = only ? [this.#pending.get(only)].filter((r) => r !== undefined) : this.pending;
    return {
      text: asked.map((r) => r.prompt).join('\n'),
      parts: [dataPart({ requests: asked }, { [ASKED_KEY]: true })],
    };
  }
}

/** The task's final output as an artifact: its text, and a data part too when the text is JSON (structured output). */
export function outputArtifact(ref: A2aTaskRef, output: string): Artifact {
  const structured = parseStructured(output);
  return {
    artifactId: `${ref.taskId}.output`,
    name: 'output',
    description: 'the output of the task’s last step',
    parts: [textPart(output), ...(structured === undefined ? [] : [dataPart(structured)])],
    metadata: undefined,
    extensions: [],
  };
}

/** A task refused before any Troupe task existed (unknown pipeline, invalid input): REJECTED, with why. */
export function rejectedTask(ref: A2aTaskRef, reason: string, userMessage?: Message): Task {
  const now = new Date().toISOString();
  return {
    id: ref.taskId,
    contextId: ref.contextId,
    status: {
      state: TaskState.TASK_STATE_REJECTED,
      message: agentMessage(ref, `${ref.taskId}.rejected`, [textPart(reason)]),
      timestamp: now,
    },
    artifacts: [],
    history: userMessage ? [userMessage] : [],
    metadata: undefined,
  };
}

/**
 * The A2A stream updates of a task: given the whole task, the `task` response that opens a stream; given one Troupe
 * event, what it changes as status and artifact updates (push-notification bodies are these). An event alone is
 * mapped without the task's earlier events: fold a task's events with {@link TaskFold} to keep INPUT_REQUIRED while
 * several requests are pending.
 */
export function streamResponseOf(source: Task): StreamResponse[];
export function streamResponseOf(source: TroupeEvent, ref: A2aTaskRef): StreamResponse[];
export function streamResponseOf(source: Task | TroupeEvent, ref?: A2aTaskRef): StreamResponse[] {
  if ('kind' in source) {
    if (!ref) throw new TypeError('streamResponseOf: an event needs the task it belongs to');
    return new TaskFold(ref).apply(source);
  }
  return [{ payload: { $case: 'task', value: source } }];
}

function statusUpdate(
  ref: A2aTaskRef,
  status: TaskStatus,
  metadata?: Record<string, unknown>,
): StreamResponse {
  return {
    payload: {
      $case: 'statusUpdate',
      value: { taskId: ref.taskId, contextId: ref.contextId, status, metadata },
    },
  };
}

const itemOf = (item: number | undefined) => (item === undefined ? '' : ` (item ${item})`);

/** Output that is a JSON object or array, parsed; anything else (prose, a bare number) is not structured. */
function parseStructured(output: string): unknown {
  const text = output.trim();
  if (!text.startsWith('{') && !text.startsWith('[')) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
