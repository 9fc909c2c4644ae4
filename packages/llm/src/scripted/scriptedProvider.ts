import { ModelError } from '../errors.ts';
import type { ChatMessage, ModelProvider, ModelRequest, ModelResponse, ToolCall } from '../types.ts';
import type { Script, ScriptedTurn } from './script.ts';

const MAX_TRACKED_CONVERSATIONS = 10_000;

/**
 * Plays a script of replies, so pipelines run offline and deterministically.
 * Each agent's replies are consumed in order, separately for every task. When the call says which of the
 * agent's calls it is (`context.call`, set by the runtime), that reply is played, so a step resumed in another
 * process goes on where the first one stopped; otherwise a cursor in memory counts the calls.
 *
 * @example
 * const model = new ScriptedProvider({ agents: { planner: [{ content: 'Plan: write hello.md' }] } });
 */
export class ScriptedProvider implements ModelProvider {
  readonly provider = 'scripted';
  readonly model: string;
  readonly #script: Script;
  /** Next turn index per `<taskId>/<agent>`; insertion order doubles as LRU order. */
  readonly #cursors = new Map<string, number>();

  constructor(script: Script, model = 'scripted') {
    this.#script = script;
    this.model = model;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { taskId, agent, stepId, call } = request.context;
    const turns = this.#script.agents[agent];
    if (!turns) {
      throw new ModelError('config', `scripted model: the script has no replies for agent "${agent}"`);
    }
    const index = call ?? this.#advance(`${taskId}/${agent}`);
    const turn = turns[index];
    if (!turn) {
      throw new ModelError(
        'script_exhausted',
        `scripted model: agent "${agent}" has ${turns.length} scripted replies; reply ${index + 1} was requested (task ${taskId})`,
      );
    }
    if (turn.delayMs) await sleep(turn.delayMs, request.signal);
    if (turn.error !== undefined) throw new ModelError('scripted_failure', turn.error);
    return toResponse(turn, request.messages, `${stepId}.${index}`, this.model);
  }

  #advance(key: string): number {
    const index = this.#cursors.get(key) ?? 0;
    this.#cursors.delete(key);
    this.#cursors.set(key, index + 1);
    if (this.#cursors.size > MAX_TRACKED_CONVERSATIONS) {
      const oldest = this.#cursors.keys().next().value;
      if (oldest !== undefined) this.#cursors.delete(oldest);
    }
    return index;
  }
}

function toResponse(
  turn: ScriptedTurn,
  messages: ChatMessage[],
  idPrefix: string,
  model: string,
): ModelResponse {
  const toolCalls: ToolCall[] = turn.toolCalls.map((call, i) => ({
    id: call.id ?? `call_${idPrefix}.${i}`,
    name: call.name,
    arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments),
  }));
  const outputChars =
    turn.content.length + toolCalls.reduce((n, c) => n + c.name.length + c.arguments.length, 0);
  return {
    content: turn.content,
    toolCalls,
    usage: {
      inputTokens:
        turn.usage?.inputTokens ?? estimateTokens(messages.reduce((n, m) => n + m.content.length, 0)),
      outputTokens: turn.usage?.outputTokens ?? estimateTokens(outputChars),
      cachedTokens: 0,
    },
    finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
    model,
  };
}

const estimateTokens = (chars: number): number => Math.ceil(chars / 4);

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new ModelError('aborted', 'model call aborted'));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new ModelError('aborted', 'model call aborted'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
