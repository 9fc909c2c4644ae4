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
 * (the request is not a message; a call's arguments come whole with `tool.call`).
 */
export class AgUiMapper {
  /** Model turns whose text was streamed: their message is open until the reply ends it. */
  readonly #streamed = new Set<string>();
  readonly #threadId: string;

  /** `threadId`: the task's session, when it has one; else its own id. */
  constructor(threadId: string) {
    this.#threadId = threadId;
  }

  map(event: TroupeEvent): AGUIEvent[] {
    const base = { timestamp: Date.parse(event.ts), rawEvent: event };
    const threadId = this.#threadId;
    switch (event.kind) {
      case 'task.accepted':
        return [{ type: EventType.RUN_STARTED, ...base, threadId, runId: event.taskId }];
      case 'step.started':
        return [{ type: EventType.STEP_STARTED, ...base, stepName: event.data.step }];
      case 'step.completed':
        return [{ type: EventType.STEP_FINISHED, ...base, stepName: event.data.step }];
      case 'llm.request':
        return [];
      case 'llm.delta': {
        const messageId = messageOf(event.data);
        const out: AGUIEvent[] = [];
        if (!this.#streamed.has(messageId)) {
          this.#streamed.add(messageId);
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
      case 'llm.response': {
        const messageId = messageOf(event.data);
        if (this.#streamed.delete(messageId))
          return [{ type: EventType.TEXT_MESSAGE_END, ...base, messageId }];
        if (event.data.content === '') return [];
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
              : { parentMessageId: messageOf({ ...event.data, turn: event.data.turn }) }),
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
      case 'task.completed':
        return [
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
          {
            type: EventType.RUN_FINISHED,
            ...base,
            threadId,
            runId: event.taskId,
            outcome: { type: 'cancelled' },
          },
        ];
      case 'task.failed':
        return [{ type: EventType.RUN_ERROR, ...base, message: event.data.message, code: event.data.reason }];
      default:
        return [{ type: EventType.CUSTOM, ...base, name: `troupe.${event.kind}`, value: event.data }];
    }
  }
}

/** A model turn's message: one per step and turn. */
const messageOf = (d: { stepId: string; turn: number }) => `${d.stepId}.${d.turn}`;

/** A tool call, by its place (models may repeat call ids across turns, or send none). */
const callOf = (d: {
  stepId: string;
  turn?: number | undefined;
  index?: number | undefined;
  callId: string;
}) => (d.turn === undefined ? `${d.stepId}.${d.callId}` : `${d.stepId}.${d.turn}.${d.index ?? d.callId}`);
