import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import { ModelError, type ModelErrorCode } from '@troupe/llm';
import type { ApprovalDecision, EventOf, ToldMessage, TroupeEvent, ValueRef } from '@troupe/protocol';
import {
  type ApprovalAsk,
  type HumanGate,
  type HumanScope,
  type JournalEntry,
  NewerJournalRecordError,
  StepJournal,
  ToolError,
} from '@troupe/runtime';

/** How an event's text was shortened for the wire (`preview`): a recording with it cannot be replayed exactly. */
const TRUNCATED = /…\[\d+ more characters\]$/;

/** What the recorded run's model said at one turn of one step: a reply, or the error it failed with. */
type RecordedTurn =
  | { kind: 'reply'; response: ModelResponse }
  | { kind: 'error'; code: string; message: string };

/** A tool call of the recorded run, as {@link Recording.calls} lists them. */
export interface RecordedCall {
  callId: string;
  tool: string;
  arguments: string;
  result: EventOf<'tool.result'> | undefined;
}

/** Where the whole of what events kept only in part is read: the step journal, which keeps every reply whole. */
export interface JournalReader {
  entry(key: string): Promise<JournalEntry | undefined>;
}

/** Where values too large for an event are read back whole: the pipeline's object store (`ValueStore`). */
export interface ValueReader {
  read(ref: ValueRef): Promise<string>;
}

/** Something the events kept only in part, and how the journal's record under its key makes it whole. */
interface PartKept {
  label: string;
  /** Takes the record's text if it is the same reply or summary; says whether it did. */
  restore(entry: JournalEntry): boolean;
}

/**
 * A task's run as its events recorded it, for `troupe replay`: the model's replies by step and turn (text from
 * `llm.response`, each tool call's arguments from its `tool.call`), the summaries that condensed long
 * conversations (`context.compacted`), and the tool results by step, turn and position. Texts longer than an event
 * keeps are read whole from the step journal when one is given ({@link Recording.restore}).
 */
export class Recording {
  readonly taskId: string;
  readonly pipeline: string;
  readonly accepted: EventOf<'task.accepted'> | undefined;
  readonly events: readonly TroupeEvent[];
  readonly #turns = new Map<string, RecordedTurn>();
  readonly #summaries = new Map<string, ModelResponse>();
  readonly #results = new Map<string, EventOf<'tool.result'>>();
  /** Recorded results by the call id the model gave, in order (a resumed step replays a call under the same id). */
  readonly #byCallId = new Map<string, EventOf<'tool.result'>>();
  /** What the events kept only in part, by the journal key that holds it whole. */
  readonly #partial = new Map<string, PartKept>();
  /** Each step's last reply (no tool calls) kept in part, by step id, with the journal key of its part. */
  readonly #lastReplies = new Map<string, { key: string; response: ModelResponse }>();
  /** Where each step's whole output is kept, when its `step.completed` held only a preview. */
  readonly #outputRefs = new Map<string, ValueRef>();
  /** The messages people told the task, by id (`task.told`), and the ids each step read before a turn (`agent.told`). */
  readonly #told = new Map<string, ToldMessage>();
  readonly #toldRead = new Map<string, string[]>();

  constructor(taskId: string, events: readonly TroupeEvent[]) {
    this.taskId = taskId;
    this.events = events.filter((e) => e.taskId === taskId);
    this.pipeline = this.events[0]?.pipeline ?? '';
    this.accepted = this.events.find((e): e is EventOf<'task.accepted'> => e.kind === 'task.accepted');
    const calls = new Map<string, EventOf<'tool.call'>[]>();
    for (const event of this.events) {
      if (event.kind === 'tool.call') {
        const key = turnKey(event.data.stepId, event.data.turn ?? 0);
        calls.set(key, [...(calls.get(key) ?? []), event]);
      }
      if (event.kind === 'step.completed' && event.data.outputRef)
        this.#outputRefs.set(event.data.stepId, event.data.outputRef);
      if (event.kind === 'task.told') {
        const { messageId, text, by } = event.data;
        this.#told.set(messageId, { id: messageId, text, ...(by === undefined ? {} : { by }), at: event.ts });
      }
      if (event.kind === 'agent.told')
        this.#toldRead.set(turnKey(event.data.stepId, event.data.turn), event.data.messageIds);
      if (event.kind === 'tool.result') {
        this.#results.set(callKey(event.data.stepId, event.data.turn ?? 0, event.data.index ?? 0), event);
        if (!this.#byCallId.has(event.data.callId) || !event.data.journaled)
          this.#byCallId.set(event.data.callId, event);
      }
    }
    const compaction = StepJournal.compactionNumbering();
    for (const event of this.events) {
      if (event.kind === 'llm.error') {
        const key = turnKey(event.data.stepId, event.data.turn);
        if (!this.#turns.has(key))
          this.#turns.set(key, { kind: 'error', code: event.data.code, message: event.data.message });
      }
      if (event.kind === 'context.compacted') {
        const n = compaction(event.data);
        if (n !== undefined) this.#summary(event.data, n);
      }
      if (event.kind !== 'llm.response') continue;
      const d = event.data;
      const key = turnKey(d.stepId, d.turn);
      // The reply that was made stands over its replays by a resumed run (they are the same reply). A turn asked again
      // after a crash (its reply was not journaled: a local step's final reply is left to the workflow's checkpoint)
      // may have been answered otherwise: the later reply, which the task went on with, stands.
      if (this.#turns.get(key)?.kind === 'reply' && d.journaled) continue;
      const made = (calls.get(key) ?? []).sort((a, b) => (a.data.index ?? 0) - (b.data.index ?? 0));
      const toolCalls: ToolCall[] = d.toolCalls.map((call, index) => ({
        id: call.id,
        name: call.name,
        arguments: made.find((m) => (m.data.index ?? index) === index)?.data.arguments ?? '{}',
      }));
      const response: ModelResponse = {
        content: d.content,
        toolCalls,
        usage: d.usage,
        finishReason: d.finishReason as ModelResponse['finishReason'],
        model: d.model,
        provider: d.provider,
      };
      this.#turns.set(key, { kind: 'reply', response });
      // What the events kept in part of a reply this one replaces is not the replay's any more.
      this.#partial.delete(StepJournal.modelKey(d.stepId, d.turn));
      if (this.#lastReplies.get(d.stepId)?.key === StepJournal.modelKey(d.stepId, d.turn))
        this.#lastReplies.delete(d.stepId);
      if (TRUNCATED.test(d.content) || toolCalls.some((c) => TRUNCATED.test(c.arguments))) {
        if (toolCalls.length === 0)
          this.#lastReplies.set(d.stepId, { key: StepJournal.modelKey(d.stepId, d.turn), response });
        this.#partial.set(StepJournal.modelKey(d.stepId, d.turn), {
          label: `${d.stepId} turn ${d.turn}`,
          restore: (entry) => {
            if (entry.kind !== 'model.reply' || !sameReply(response, entry.reply)) return false;
            response.content = entry.reply.content;
            response.toolCalls = entry.reply.toolCalls;
            return true;
          },
        });
      }
    }
  }

  /** Texts the events kept only in part (long replies, arguments or summaries): the replay may differ there. */
  get truncated(): string[] {
    return [...this.#partial.values()].map((p) => p.label);
  }

  /**
   * Reads whole from the step journal every text the events kept only in part. What the journal does not have
   * (a run without one, a record replaced since, or one of a kind only a newer host knows) stays as the events kept
   * it, and in {@link truncated}: a step must not go on without such a record, but a replay only loses its whole text.
   */
  async restore(journal: JournalReader): Promise<void> {
    await Promise.all(
      [...this.#partial].map(async ([key, part]) => {
        const entry = await journal.entry(key).catch((error: unknown) => {
          if (NewerJournalRecordError.is(error)) return undefined;
          throw error;
        });
        if (entry && part.restore(entry)) this.#partial.delete(key);
      }),
    );
  }

  /**
   * Reads whole from the object store each step's last reply the events and the journal kept only in part (a reply
   * too large for either): it is the step's output, which its `step.completed` names by reference.
   */
  async restoreValues(values: ValueReader): Promise<void> {
    await Promise.all(
      [...this.#lastReplies].map(async ([stepId, { key, response }]) => {
        const ref = this.#outputRefs.get(stepId);
        if (!ref || !this.#partial.has(key)) return;
        const whole = await values.read(ref).catch(() => undefined);
        if (whole === undefined || !whole.startsWith(kept(response.content))) return;
        response.content = whole;
        this.#partial.delete(key);
      }),
    );
  }

  /** The recorded model turn, if the recorded run made it. */
  turn(stepId: string, turn: number): RecordedTurn | undefined {
    return this.#turns.get(turnKey(stepId, turn));
  }

  /**
   * The messages the recorded run's agent read just before its model call `turn` of a step, to read at the same turn
   * again; undefined when it read none there. A message whose `task.told` the recording lacks is refused: the replay
   * could not say what the agent read.
   */
  toldBefore(stepId: string, turn: number): ToldMessage[] | undefined {
    const ids = this.#toldRead.get(turnKey(stepId, turn));
    return ids?.map((id) => {
      const message = this.#told.get(id);
      if (!message)
        throw new Error(
          `the recording of task ${this.taskId} says step ${stepId} read message ${id} before turn ${turn}, but holds no task.told event of it`,
        );
      return message;
    });
  }

  /** The recorded result of a tool call, by its step, turn and position. */
  toolResult(stepId: string, turn: number, index: number): EventOf<'tool.result'> | undefined {
    return this.#results.get(callKey(stepId, turn, index));
  }

  /**
   * Every tool call the recorded run's model asked for, in the order it asked: the tool, its arguments (whole where
   * the journal made them whole) and the recorded result, if the call has one.
   */
  calls(): RecordedCall[] {
    return [...this.#turns.values()].flatMap((turn) =>
      turn.kind === 'reply'
        ? turn.response.toolCalls.map((call) => ({
            callId: call.id,
            tool: call.name,
            arguments: call.arguments,
            result: this.#byCallId.get(call.id),
          }))
        : [],
    );
  }

  /** The recorded result of the call the model made under this id. */
  resultOfCall(callId: string): EventOf<'tool.result'> | undefined {
    return this.#byCallId.get(callId);
  }

  /**
   * People as the recorded run met them: an approval asked for a call gets the decision recorded for the call of the
   * same id (an expired one its deny), and a step's n-th question the answer its n-th question got, or fails as it
   * timed out. A call or question the recorded run asked nobody about is denied, or fails, saying so.
   */
  people(): HumanGate {
    const events = this.events;
    const asked = new Map<string, number>();
    return {
      approve: async (ask: ApprovalAsk, scope: HumanScope): Promise<ApprovalDecision> => {
        const requested = events.find(
          (e): e is EventOf<'approval.requested'> =>
            e.kind === 'approval.requested' && e.data.stepId === scope.stepId && e.data.callId === ask.callId,
        );
        if (!requested) {
          return {
            decision: 'deny',
            reason: `the recorded run asked nobody about call ${ask.callId}`,
            by: 'replay',
          };
        }
        const decided = events.find(
          (e): e is EventOf<'approval.decided'> =>
            e.kind === 'approval.decided' && e.data.approvalId === requested.data.approvalId,
        );
        if (!decided) {
          return {
            decision: 'deny',
            reason: `nobody decided approval ${requested.data.approvalId} in the recorded run`,
            by: 'replay',
          };
        }
        const { decision, reason, by } = decided.data;
        return { decision, ...(reason === undefined ? {} : { reason }), ...(by === undefined ? {} : { by }) };
      },
      ask: async (_question: string, scope: HumanScope): Promise<string> => {
        const n = (asked.get(scope.stepId) ?? 0) + 1;
        asked.set(scope.stepId, n);
        const ids = [
          ...new Set(
            events.flatMap((e) =>
              e.kind === 'human.asked' && e.data.stepId === scope.stepId ? [e.data.questionId] : [],
            ),
          ),
        ];
        const id = ids[n - 1];
        if (id === undefined) {
          throw new ToolError(
            'not_found',
            `the recorded run asked fewer than ${n} questions at step ${scope.stepId}`,
          );
        }
        const answered = events.find(
          (e): e is EventOf<'human.answered'> => e.kind === 'human.answered' && e.data.questionId === id,
        );
        if (!answered) throw new ToolError('timeout', `nobody answered question ${id} in the recorded run`);
        return answered.data.answer;
      },
    };
  }

  /**
   * A model for one agent that answers from the recording: each call of a step takes the step's next recorded turn,
   * and each summary its next recorded summary. A turn or summary the recording does not have fails the call with
   * `not_found`, saying so (the replay diverged).
   */
  modelFor(agent: string, provider: string, model: string): ModelProvider {
    const turns = new Map<string, number>();
    const summaries = new Map<string, number>();
    return {
      provider,
      model,
      complete: async (request: ModelRequest): Promise<ModelResponse> => {
        const stepId = request.context?.stepId ?? '';
        if (request.context?.purpose === 'summary') {
          const n = (summaries.get(stepId) ?? 0) + 1;
          summaries.set(stepId, n);
          const summary = this.#summaries.get(summaryKey(stepId, n));
          if (summary) return summary;
          throw new ModelError(
            'not_found',
            `the recorded run of agent ${agent} summarized its conversation fewer than ${n} times at step ${stepId}`,
          );
        }
        const turn = (turns.get(stepId) ?? 0) + 1;
        turns.set(stepId, turn);
        const recorded = this.turn(stepId, turn);
        if (!recorded) {
          throw new ModelError(
            'not_found',
            `the recorded run of agent ${agent} made no model call at step ${stepId}, turn ${turn}`,
          );
        }
        if (recorded.kind === 'error')
          throw new ModelError(recorded.code as ModelErrorCode, recorded.message);
        return recorded.response;
      },
    };
  }

  /** A summary as the model call that wrote it answered. */
  #summary(d: EventOf<'context.compacted'>['data'], n: number): void {
    const response: ModelResponse = {
      content: d.summary,
      toolCalls: [],
      usage: d.usage ?? { inputTokens: 0, outputTokens: 0, cachedTokens: 0 },
      finishReason: 'stop',
      model: d.model ?? '',
      ...(d.provider ? { provider: d.provider } : {}),
    };
    this.#summaries.set(summaryKey(d.stepId, n), response);
    if (!TRUNCATED.test(d.summary)) return;
    this.#partial.set(StepJournal.compactionKey(d.stepId, n), {
      label: `${d.stepId} summary ${n}`,
      restore: (entry) => {
        if (entry.kind !== 'compaction' || !entry.summary.startsWith(kept(d.summary))) return false;
        response.content = entry.summary;
        return true;
      },
    });
  }
}

/** The part of a shortened text that was kept. */
const kept = (text: string) => text.replace(TRUNCATED, '');

/** Whether a journaled reply is the one an event kept in part: the same calls, and the kept text its start. */
function sameReply(
  recorded: Pick<ModelResponse, 'content' | 'toolCalls'>,
  journaled: Pick<ModelResponse, 'content' | 'toolCalls'>,
): boolean {
  return (
    journaled.content.startsWith(kept(recorded.content)) &&
    journaled.toolCalls.length === recorded.toolCalls.length &&
    journaled.toolCalls.every(
      (call, i) =>
        call.id === recorded.toolCalls[i]?.id &&
        call.arguments.startsWith(kept(recorded.toolCalls[i]?.arguments ?? '')),
    )
  );
}

const turnKey = (stepId: string, turn: number) => `${stepId}#${turn}`;
const summaryKey = (stepId: string, n: number) => `${stepId}#c${n}`;
const callKey = (stepId: string, turn: number, index: number) => `${stepId}#${turn}#${index}`;
