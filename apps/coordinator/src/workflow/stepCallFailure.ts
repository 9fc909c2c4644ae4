import { stepTimeoutError, TransportError, type TransportErrorCode } from '@troupe/runtime';
import type { StepCallContext } from './stepCall.ts';

/** Why a call ended without a reply, as plain data (it is part of a checkpoint); `code` when a transport code said it. */
export interface StepCallFailure {
  code?: TransportErrorCode;
  message: string;
}

/** The step's timeout as its failure: `approval_timeout` when the last heartbeat said a person was being asked. */
export function timedOut(context: StepCallContext): StepCallFailure {
  const failure = stepTimeoutError(context.request.agent, context.timeoutMs, context.waitingFor);
  // A step sent again and again for the same reason (a journal only a newer host reads, say) ran out of time for it.
  const { resentBecause } = context;
  return resentBecause === undefined
    ? failure
    : { ...failure, message: `${failure.message}; it was last sent again because ${resentBecause}` };
}

/**
 * A failure as plain data: a transport failure keeps its code, anything else its message. No worker is explained
 * with how long the call waited (`now` less `noWorkerSince`) and what to start, so the user can act on it.
 */
export function failureOf(context: StepCallContext, error: unknown, now: number): StepCallFailure {
  if (TransportError.is(error, 'no_responders')) {
    const waited = context.noWorkerSince === undefined ? 0 : now - context.noWorkerSince;
    return {
      code: 'no_responders',
      message:
        `no worker serves agent ${context.request.agent} on ${context.subject} (waited ${Math.round(waited / 1000)} s); ` +
        'start `troupe worker` (or `troupe up` without --no-agents) with this pipeline on this NATS server',
    };
  }
  if (TransportError.is(error)) return { code: error.code, message: error.message };
  return { message: error instanceof Error ? error.message : String(error) };
}

/** The failure as the error the workflow reads its reason from (a `TransportError` when it has a code). */
export function errorOf(failure: StepCallFailure | undefined): Error {
  if (!failure) return new Error('step call ended');
  return failure.code ? new TransportError(failure.code, failure.message) : new Error(failure.message);
}
