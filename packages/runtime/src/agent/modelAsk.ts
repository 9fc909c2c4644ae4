import type { Span } from '@opentelemetry/api';
import type { FallbackInfo, ModelDelta, ModelObserver, ModelResponse, RetryInfo } from '@troupe/llm';
import type { ModelReply } from '@troupe/protocol';
import type { ModelCallInput } from './agentServices.ts';
import { type DeltaBatch, DeltaBatcher } from './deltaBatcher.ts';
import { ModelToolNames } from './modelToolNames.ts';
import { promptCacheHint } from './promptCacheHint.ts';
import type { StepContext } from './stepContext.ts';
import { endModelSpan, startModelSpan } from './stepTracing.ts';

/** How a model call's end is taken: its response, or its failure (see {@link waitingOnModel}). */
export interface ModelOutcome<R> {
  answered(response: ModelResponse): R;
  failed(error: unknown): R;
}

/**
 * A model call, with the host told while the step waits on it (a long wait parks the task): `outcome` takes its end
 * once the wait is told over, in one callback rather than after a `finally`, so a step waiting on its model keeps one
 * promise here. A provider that throws rather than rejects fails the call all the same.
 */
export function waitingOnModel<R>(
  step: StepContext,
  call: () => Promise<ModelResponse>,
  outcome: ModelOutcome<R>,
): Promise<R> {
  const { deps, request } = step;
  deps.modelWait?.(request.stepId, true);
  let asked: Promise<ModelResponse>;
  try {
    asked = call();
  } catch (error) {
    asked = Promise.reject(error);
  }
  return asked.then(
    (response) => {
      deps.modelWait?.(request.stepId, false);
      return outcome.answered(response);
    },
    (error: unknown) => {
      deps.modelWait?.(request.stepId, false);
      return outcome.failed(error);
    },
  );
}

/**
 * One turn's model call as asked: its streamed deltas, retries and fallbacks published as events (it is the call's
 * observer), its span, and its response made the turn's reply. One object with methods, not closures over the call's
 * scope: a step waiting on its model (a parked one) keeps this and the call's promises.
 */
export class ModelAsk implements ModelObserver, ModelOutcome<ModelReply> {
  readonly #step: StepContext;
  readonly #turn: number;
  readonly #started: number;
  readonly #span: Span;
  readonly #names: ModelToolNames;
  readonly #batcher: DeltaBatcher | undefined;

  /** Asks the agent's model the turn's conversation; the reply is priced and timed, the span ended either way. */
  static ask(step: StepContext, input: ModelCallInput, signal: AbortSignal): Promise<ModelReply> {
    const ask = new ModelAsk(step, input);
    const reply = waitingOnModel(step, () => ask.#complete(input, signal), ask);
    return ask.#batcher ? reply.finally(() => ask.#batcher?.flush()) : reply;
  }

  private constructor(step: StepContext, input: ModelCallInput) {
    this.#step = step;
    this.#turn = input.turn;
    this.#started = step.deps.clock.now();
    this.#names = ModelToolNames.of(input.tools);
    this.#batcher = step.agent.stream
      ? new DeltaBatcher({ emit: (batch) => this.#publishDeltas(batch) })
      : undefined;
    this.#span = startModelSpan(step, input.turn, input.messages);
  }

  onDelta(delta: ModelDelta): void {
    this.#batcher?.add(delta);
  }

  onRetry(info: RetryInfo): void {
    const { agent, deps, scope } = this.#step;
    this.#span.addEvent('llm.retry', { attempt: info.attempt, 'error.type': info.code });
    this.#batcher?.flush();
    deps.publish(
      deps.events.make(
        'llm.retry',
        scope,
        { ...this.#ref(), ...info },
        { from: `${info.provider}:${info.model}`, to: agent.name },
      ),
    );
  }

  onFallback(info: FallbackInfo): void {
    const { deps, scope } = this.#step;
    this.#span.addEvent('llm.fallback', { from: info.from, to: info.to });
    // Deltas of the model that failed go out before the fallback is announced.
    this.#batcher?.flush();
    deps.publish(
      deps.events.make('llm.fallback', scope, { ...this.#ref(), ...info }, { from: info.from, to: info.to }),
    );
  }

  /** The response as the turn's reply: its tool names as the agent knows them, priced and timed. */
  answered(reply: ModelResponse): ModelReply {
    const { agent, deps } = this.#step;
    try {
      const response = this.#names.identity ? reply : this.#names.response(reply);
      const provider = response.provider ?? agent.model.provider;
      const result: ModelReply = {
        content: response.content,
        toolCalls: response.toolCalls,
        usage: response.usage,
        costUsd: deps.price?.(provider, response.model, response) ?? 0,
        finishReason: response.finishReason,
        provider,
        model: response.model,
        durationMs: Math.max(0, deps.clock.now() - this.#started),
      };
      endModelSpan(this.#span, { reply: result });
      return result;
    } catch (error) {
      return this.failed(error);
    }
  }

  failed(error: unknown): never {
    endModelSpan(this.#span, { error });
    throw error;
  }

  #complete(input: ModelCallInput, signal: AbortSignal): Promise<ModelResponse> {
    const { agent, request, deps } = this.#step;
    const names = this.#names;
    const cache = promptCacheHint(agent, request, deps.human !== undefined);
    return agent.model.complete({
      messages: names.identity ? input.messages : names.messages(input.messages),
      tools: names.identity ? input.tools : names.tools(input.tools),
      context: callContext(this.#step, input.callsBefore),
      signal,
      observer: this,
      ...(agent.stream ? { stream: true } : {}),
      ...(cache ? { cache } : {}),
      ...(input.responseSchema ? { responseSchema: input.responseSchema } : {}),
      ...(agent.temperature === undefined ? {} : { temperature: agent.temperature }),
      ...(agent.maxTokens === undefined ? {} : { maxTokens: agent.maxTokens }),
    });
  }

  #publishDeltas(batch: DeltaBatch): void {
    const { agent, deps, scope } = this.#step;
    deps.publish(
      deps.events.make(
        'llm.delta',
        scope,
        {
          ...this.#ref(),
          seq: batch.seq,
          text: batch.text,
          ...(batch.toolCalls.length > 0 ? { toolCalls: batch.toolCalls } : {}),
        },
        { from: `${agent.model.provider}:${agent.model.model}`, to: agent.name },
      ),
    );
  }

  /** Which call the events name: the agent, its step and the turn. */
  #ref(): { agent: string; stepId: string; turn: number } {
    return { agent: this.#step.agent.name, stepId: this.#step.request.stepId, turn: this.#turn };
  }
}

/** Who is calling; numbers the call within the task when the workflow said how many came before the step. */
export const callContext = ({ agent, request }: StepContext, callsBefore: number) => ({
  taskId: request.taskId,
  pipeline: request.pipeline,
  agent: agent.name,
  stepId: request.stepId,
  ...(request.priorModelCalls === undefined ? {} : { call: request.priorModelCalls + callsBefore }),
});
