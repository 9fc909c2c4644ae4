import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import { ModelError, type ModelErrorCode } from '@troupe/llm';
import type { EventOf, TroupeEvent } from '@troupe/protocol';

/** How an event's text was shortened for the wire (`preview`): a recording with it cannot be replayed exactly. */
const TRUNCATED = /…\[\d+ more characters\]$/;

/** What the recorded run's model said at one turn of one step: a reply, or the error it failed with. */
type RecordedTurn =
  | { kind: 'reply'; response: ModelResponse; truncated: boolean }
  | { kind: 'error'; code: string; message: string };

/**
 * A task's run as its events recorded it, for `troupe replay`: the model's replies by step and turn (text from
 * `llm.response`, each tool call's arguments from its `tool.call`), and the tool results by step, turn and position.
 */
export class Recording {
  readonly taskId: string;
  readonly pipeline: string;
  readonly accepted: EventOf<'task.accepted'> | undefined;
  readonly events: readonly TroupeEvent[];
  readonly #turns = new Map<string, RecordedTurn>();
  readonly #results = new Map<string, EventOf<'tool.result'>>();
  /** Recorded results by the call id the model gave, in order (a resumed step replays a call under the same id). */
  readonly #byCallId = new Map<string, EventOf<'tool.result'>>();
  /** Turns whose text or arguments the events kept only in part. */
  readonly truncated: string[] = [];

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
      if (event.kind === 'tool.result') {
        this.#results.set(callKey(event.data.stepId, event.data.turn ?? 0, event.data.index ?? 0), event);
        if (!this.#byCallId.has(event.data.callId) || !event.data.journaled)
          this.#byCallId.set(event.data.callId, event);
      }
    }
    for (const event of this.events) {
      if (event.kind === 'llm.error') {
        const key = turnKey(event.data.stepId, event.data.turn);
        if (!this.#turns.has(key))
          this.#turns.set(key, { kind: 'error', code: event.data.code, message: event.data.message });
      }
      if (event.kind !== 'llm.response') continue;
      const d = event.data;
      const key = turnKey(d.stepId, d.turn);
      const made = (calls.get(key) ?? []).sort((a, b) => (a.data.index ?? 0) - (b.data.index ?? 0));
      const toolCalls: ToolCall[] = d.toolCalls.map((call, index) => ({
        id: call.id,
        name: call.name,
        arguments: made.find((m) => (m.data.index ?? index) === index)?.data.arguments ?? '{}',
      }));
      const truncated = TRUNCATED.test(d.content) || toolCalls.some((c) => TRUNCATED.test(c.arguments));
      if (truncated) this.truncated.push(`${d.stepId} turn ${d.turn}`);
      // The reply that was made stands over its replays by a resumed run (they are the same reply).
      if (this.#turns.get(key)?.kind === 'reply') continue;
      this.#turns.set(key, {
        kind: 'reply',
        truncated,
        response: {
          content: d.content,
          toolCalls,
          usage: d.usage,
          finishReason: d.finishReason as ModelResponse['finishReason'],
          model: d.model,
          provider: d.provider,
        },
      });
    }
  }

  /** The recorded model turn, if the recorded run made it. */
  turn(stepId: string, turn: number): RecordedTurn | undefined {
    return this.#turns.get(turnKey(stepId, turn));
  }

  /** The recorded result of a tool call, by its step, turn and position. */
  toolResult(stepId: string, turn: number, index: number): EventOf<'tool.result'> | undefined {
    return this.#results.get(callKey(stepId, turn, index));
  }

  /** The recorded result of the call the model made under this id. */
  resultOfCall(callId: string): EventOf<'tool.result'> | undefined {
    return this.#byCallId.get(callId);
  }

  /**
   * A model for one agent that answers from the recording: each call of a step takes the step's next recorded turn.
   * A turn the recording does not have fails the call with `not_found`, saying so (the replay diverged).
   */
  modelFor(agent: string, provider: string, model: string): ModelProvider {
    const turns = new Map<string, number>();
    return {
      provider,
      model,
      complete: async (request: ModelRequest): Promise<ModelResponse> => {
        const stepId = request.context?.stepId ?? '';
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
}

const turnKey = (stepId: string, turn: number) => `${stepId}#${turn}`;
const callKey = (stepId: string, turn: number, index: number) => `${stepId}#${turn}#${index}`;
