import { type AGUIEvent, EventType } from '@ag-ui/core';
import type { TroupeEvent } from '@troupe/protocol';

/**
 * Troupe's events in the AG-UI protocol's form, for front-ends that speak it (CopilotKit and others). One task is
 * one run (`runId` = the task id) in one thread (the task's session when it has one, else the task id):
 *
 * | Troupe event                      | AG-UI events                                                           |
 * | --------------------------------- | ---------------------------------------------------------------------- |
 * | `task.accepted`                   | `RUN_STARTED`                                                          |
 * | `step.started` / `step.completed` | `STEP_STARTED` / `STEP_FINISHED` (`stepName` = the step's id)           |
 * | `llm.delta` (text)                | `TEXT_MESSAGE_START` at the turn's first, then `TEXT_MESSAGE_CONTENT`  |
 * | `llm.response`                    | the whole message (START, CONTENT, END), or END after streamed deltas |
 * | `tool.call`                       | `TOOL_CALL_START`, `TOOL_CALL_ARGS`, `TOOL_CALL_END`                   |
 * | `tool.result`                     | `TOOL_CALL_RESULT`                                                     |
 * | `task.completed`                  | `RUN_FINISHED` (outcome `success`, `result` = the output)             |
 * | `task.cancelled`                  | `RUN_FINISHED` (outcome `cancelled`)                                   |
 * | `task.failed`                     | `RUN_ERROR` (`code` = the failure's reason)                            |
 * | anything else                     | `CUSTOM`, named `troupe.<kind>` (approvals, questions, retries, …)     |
 *
 * Each carries the Troupe event it came from as `rawEvent`. `llm.request` and tool-call deltas are not mapped
 * (the request is not a message; a call's arguments come whole with `tool.call`). A streamed message is ended when
 * its attempt fails (`llm.retry`, `llm.fallback`, `llm.error`); the next attempt's text is a message of its own
 * (`<stepId>.<turn>.<attempt>`). A run's end first ends whatever it left open: messages, then steps.
 *
 * `RUN_STARTED` always comes first, as AG-UI requires: a stream whose first event is not `task.accepted` (a
 * session's `session.compacted` is stored before it; a stream resumed past it) opens with a `RUN_STARTED` of its
 * own, and `task.accepted` adds nothing after it.
 */
export class AgUiMapper {
  /** Streamed messages not ended yet, by model turn (`<stepId>.<turn>`). */
  readonly #open = new Map<string, string>();
  /** The attempt a model turn is at: a retry or a fallback starts a new message, the failed one ended. */
  readonly #attempts = new Map<string, number>();
  /** Steps started and not finished, by step id, with their flow step's name. */
  readonly #steps = new Map<string, string>();
  readonly #threadId: string;
  #started = false;

  /** `threadId`: the task's session, when it has one; else its own id. */
  constructor(threadId: string) {
    this.#threadId = threadId;
  }

  map(event: TroupeEvent): AGUIEvent[] {
    if (this.#started) return event.kind === 'task.accepted' ? [] : this.#map(event);
    this.#started = true;
    const accepted = event.kind === 'task.accepted';
    const started: AGUIEvent = {
      type: EventType.RUN_STARTED,
      timestamp: Date.parse(event.ts),
      ...(accepted ? { rawEvent: event } : {}),
      threadId: this.#threadId,
      runId: event.taskId,
    };
    return accepted ? [started] : [started, ...this.#map(event)];
  }

  #map(event: TroupeEvent): AGUIEvent[] {
    const base = { timestamp: Date.parse(event.ts), rawEvent: event };
    const threadId = this.#threadId;
    switch (event.kind) {
      case 'step.started':
        this.#steps.set(event.data.stepId, event.data.step);
        return [{ type: EventType.STEP_STARTED, ...base, stepName: event.data.step }];
      case 'step.completed': {
        const closing = this.#endMessages(base, (turn) => turn.startsWith(`${event.data.stepId}.`));
        this.#steps.delete(event.data.stepId);
        return [...closing, { type: EventType.STEP_FINISHED, ...base, stepName: event.data.step }];
      }
      case 'llm.request':
        return [];
      case 'llm.delta': {
        const turn = turnOf(event.data);
        const out: AGUIEvent[] = [];
        let messageId = this.#open.get(turn);
        if (messageId === undefined) {
          messageId = this.#messageId(turn);
          this.#open.set(turn, messageId);
          out.push({
            type: EventType.TEXT_MESSAGE_START,
            ...base,
            messageId,
            role: 'assistant',
            name: event.data.agent,
          });
        }
        if (event.data.text !== '')
          out.push({ type: EventType.TEXT_MESSAGE_CONTENT, ...base, messageId, delta: event.data.text });
        return out;
      }
      case 'llm.retry':
      case 'llm.fallback':
      case 'llm.error': {
        // The attempt's streamed text ends here; what the next attempt streams is a message of its own.
        const turn = turnOf(event.data);
        const closing = this.#endMessages(base, (t) => t === turn);
        this.#attempts.set(turn, (this.#attempts.get(turn) ?? 1) + 1);
        return [
          ...closing,
          { type: EventType.CUSTOM, ...base, name: `troupe.${event.kind}`, value: event.data },
        ];
      }
      case 'llm.response': {
        const turn = turnOf(event.data);
        const open = this.#open.get(turn);
        if (open !== undefined) {
          this.#open.delete(turn);
          return [{ type: EventType.TEXT_MESSAGE_END, ...base, messageId: open }];
        }
        if (event.data.content === '') return [];
        const messageId = this.#messageId(turn);
        return [
          {
            type: EventType.TEXT_MESSAGE_START,
            ...base,
            messageId,
            role: 'assistant',
            name: event.data.agent,
          },
          { type: EventType.TEXT_MESSAGE_CONTENT, ...base, messageId, delta: event.data.content },
          { type: EventType.TEXT_MESSAGE_END, ...base, messageId },
        ];
      }
      case 'tool.call': {
        const toolCallId = callOf(event.data);
        return [
          {
            type: EventType.TOOL_CALL_START,
            ...base,
            toolCallId,
            toolCallName: event.data.tool,
            ...(event.data.turn === undefined
              ? {}
              : { parentMessageId: this.#messageId(turnOf({ ...event.data, turn: event.data.turn })) }),
          },
          ...(event.data.arguments === ''
            ? []
            : [
                {
                  type: EventType.TOOL_CALL_ARGS,
                  ...base,
                  toolCallId,
                  delta: event.data.arguments,
                } as AGUIEvent,
              ]),
          { type: EventType.TOOL_CALL_END, ...base, toolCallId },
        ];
      }
      case 'tool.result': {
        const toolCallId = callOf(event.data);
        return [
          {
            type: EventType.TOOL_CALL_RESULT,
            ...base,
            messageId: `${toolCallId}.result`,
            toolCallId,
            content: event.data.output,
            role: 'tool',
          },
        ];
      }
      // A run ends with whatever it left open closed first: messages, then steps.
      case 'task.completed':
        return [
          ...this.#endAll(base),
          {
            type: EventType.RUN_FINISHED,
            ...base,
            threadId,
            runId: event.taskId,
            result: event.data.output,
            outcome: { type: 'success' },
          },
        ];
      case 'task.cancelled':
        return [
          ...this.#endAll(base),
          {
            type: EventType.RUN_FINISHED,
            ...base,
            threadId,
            runId: event.taskId,
            outcome: { type: 'cancelled' },
          },
        ];
      case 'task.failed':
        return [
          ...this.#endAll(base),
          { type: EventType.RUN_ERROR, ...base, message: event.data.message, code: event.data.reason },
        ];
      default:
        return [{ type: EventType.CUSTOM, ...base, name: `troupe.${event.kind}`, value: event.data }];
    }
  }

  /** A turn's message id: `<stepId>.<turn>`, and `.<attempt>` from its second attempt on. */
  #messageId(turn: string): string {
    const attempt = this.#attempts.get(turn) ?? 1;
    return attempt > 1 ? `${turn}.${attempt}` : turn;
  }

  /** Ends the open messages of the turns `which` picks. */
  #endMessages(
    base: { timestamp: number; rawEvent: TroupeEvent },
    which: (turn: string) => boolean,
  ): AGUIEvent[] {
    const ended: AGUIEvent[] = [];
    for (const [turn, messageId] of [...this.#open]) {
      if (!which(turn)) continue;
      this.#open.delete(turn);
      ended.push({ type: EventType.TEXT_MESSAGE_END, ...base, messageId });
    }
    return ended;
  }

  #endAll(base: { timestamp: number; rawEvent: TroupeEvent }): AGUIEvent[] {
    const ended = this.#endMessages(base, () => true);
    for (const step of this.#steps.values())
      ended.push({ type: EventType.STEP_FINISHED, ...base, stepName: step });
    this.#steps.clear();
    return ended;
  }
}

/** A model turn: one per step and turn. */
const turnOf = (d: { stepId: string; turn: number }) => `${d.stepId}.${d.turn}`;

/** A tool call, by its place (models may repeat call ids across turns, or send none). */
const callOf = (d: {
  stepId: string;
  turn?: number | undefined;
  index?: number | undefined;
  callId: string;
}) => (d.turn === undefined ? `${d.stepId}.${d.callId}` : `${d.stepId}.${d.turn}.${d.index ?? d.callId}`);
