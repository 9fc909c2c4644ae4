import type { TaskFailureReason } from '@troupe/protocol';
import { errorMessage, StepErrorCode, taskFailureReason } from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import type { EventObject } from 'xstate';
import type { StepPlace } from '../../config/flowLayout.ts';
import type { AgentAskedStep, AgentStepConfig } from '../../config/pipelineSchema.ts';
import type { Compiling, StepAt } from '../compile/flowList.ts';
import { type Recovery, recoveryOf, retryKey, retryState } from '../compile/recovery.ts';
import { placed, say, startedEvent } from '../compile/stepEvents.ts';
import { buildRequest, stepId } from '../compile/stepRequest.ts';
import {
  type ContextParam,
  type ErrorActorEvent,
  enqueueFor,
  type StepAction,
  type StepDone,
  type Transition,
  type WorkflowState,
  type WorkflowStates,
} from '../compile/workflowSetup.ts';
import { reusedReply } from '../reusedStep.ts';
import type {
  StepRunInput,
  StepRunOutput,
  WorkflowContext,
  WorkflowEmitted,
  WorkflowFailure,
} from '../workflowTypes.ts';

/** An agent step: its call to the agent, going on to the next step with the reply; and, with `retry`, its backoff. */
export function compileAgent(c: Compiling, step: AgentStepConfig, at: StepAt): WorkflowStates {
  const states: WorkflowStates = {
    [step.id]: askAgent(c, step, at, [{ target: at.next, actions: record(step) }]),
  };
  if (step.retry) states[retryKey(step)] = retryState(step, step.retry);
  return states;
}

/**
 * The state of a step an agent answers (an agent, a review, a router): it says who hands the work on and that the
 * step started, invokes `runStep` with the step's request, and goes where `replied` says with a good reply. A failed
 * reply, or a call that could not be made, goes as the step's `retry` and `onError` say.
 */
export function askAgent(
  c: Compiling,
  step: AgentAskedStep,
  at: StepAt,
  replied: Transition<StepDone>[],
): WorkflowState {
  const { place, next, resolve, scope } = at;
  const timeoutMs = (step.timeout ?? c.config.defaults.stepTimeout) * 1_000;
  const recovery = recoveryOf(step, scope, next, resolve);
  return {
    id: step.id,
    entry: [say(({ context }) => handoff(context, place, step)), startedEvent(place, step, step.agent)],
    exit: [notePeople(step)],
    invoke: {
      src: 'runStep',
      input: ({ context }): StepRunInput => ({
        request: buildRequest(c.config, context, step, place),
        timeoutMs,
        ...(c.config.budget?.pausedTimeCounts === true ? { pausedTimeCounts: true } : {}),
        // A restart's or fork's hook: a step its origin ran is answered from there, not sent.
        ...reusedReply(context, step),
      }),
      onDone: [...stepCompleted(step, recovery), ...replied],
      // The request itself failed (no worker, a timeout): no reply, so no `step.completed`.
      onError: recovery<ErrorActorEvent>(({ event }) => {
        const error = event.error;
        return {
          reason: callFailureReason(error),
          message: `step ${step.id} (${step.agent}) could not be run: ${errorMessage(error)}`,
          step: step.id,
        };
      }, []).map(({ when, ...t }) => (when ? { ...t, guard: (args) => when(args, true) } : t)),
    },
  };
}

/**
 * A failed reply ends with `step.completed` and the step's records, then is retried (`retry`), then handled as the
 * step's `onError` says — by default it fails the list it is in.
 */
function stepCompleted(step: AgentAskedStep, recovery: Recovery): Transition<StepDone>[] {
  const failure: ContextParam<WorkflowFailure, StepDone> = ({ event }) => {
    const reply = event.output;
    return {
      reason: reply.ok ? 'step_failed' : taskFailureReason(reply.error.code),
      message: reply.ok ? '' : `step ${step.id} (${step.agent}) failed: ${reply.error.message}`,
      step: step.id,
    };
  };
  const before: StepAction<StepDone>[] = [
    completedEvent(step),
    { type: 'recordUsage', params: ({ event }) => ({ step, reply: event.output }) },
    { type: 'recordWorkspace', params: ({ event }) => ({ step, reply: event.output }) },
  ];
  const retriable = (event: StepDone) => event.output.ok || event.output.error.code !== 'budget_exceeded';
  return recovery(failure, before).map(({ when, ...t }) => ({
    ...t,
    guard: (args) => !args.event.output.ok && (when === undefined || when(args, retriable(args.event))),
  }));
}

/** A good reply's records: `step.completed`, what it spent and changed, and its output. */
export function record(step: AgentAskedStep): StepAction<StepDone>[] {
  return [
    completedEvent(step),
    { type: 'recordUsage', params: ({ event }) => ({ step, reply: event.output }) },
    { type: 'recordWorkspace', params: ({ event }) => ({ step, reply: event.output }) },
    { type: 'recordOutput', params: ({ event }) => ({ step, reply: event.output }) },
  ];
}

function completedEvent(step: AgentAskedStep) {
  return say<StepDone>(({ context, event }) => {
    const reply = event.output;
    return {
      type: 'event' as const,
      kind: 'step.completed' as const,
      from: step.agent,
      to: 'workflow',
      data: {
        step: step.id,
        agent: step.agent,
        round: context.round,
        stepId: stepId(context, step),
        ok: reply.ok,
        output: reply.ok ? preview(reply.output, 256 * 1024) : '',
        ...(reply.ok && reply.outputRef ? { outputRef: reply.outputRef } : {}),
        ...(reply.ok && reply.verdict ? { verdict: reply.verdict } : {}),
        ...(reply.ok ? {} : { error: reply.error }),
        ...(reply.reused ? { reused: true } : {}),
        usage: reply.usage,
        turns: reply.turns,
        durationMs: reply.durationMs,
      },
    };
  });
}

/**
 * Leaving the step: unless its own reply says it asked nobody (`askedPeople: false`), the task's end must read its
 * requests to people. A step left any other way — its call failed, the task was cancelled or released, a sibling
 * branch ended the parallel step — or answered by a host that does not say, may have left a question pending. Exit
 * actions hear the event that left the state, and run before the transition's own (the context's step id is the
 * reply's).
 */
function notePeople(step: AgentAskedStep) {
  return enqueueFor<EventObject>(({ context, event, enqueue }) => {
    if (context.askedPeople || askedNobody(event, stepId(context, step))) return;
    enqueue.assign({ askedPeople: true });
  });
}

/** Whether the event is step `id`'s reply, saying it asked nobody. */
function askedNobody(event: EventObject, id: string): boolean {
  if (!event.type.startsWith('xstate.done.actor.') || !('output' in event)) return false;
  const reply = event.output as Partial<StepRunOutput> | undefined;
  return reply?.stepId === id && reply.askedPeople === false;
}

/** Who hands the work on: the join of a parallel or foreach step that just ended, the last agent, or the task. */
function handoff(context: WorkflowContext, place: StepPlace, step: AgentAskedStep): WorkflowEmitted {
  const from = context.joined ?? context.lastAgent ?? 'task';
  const reason = context.reworkTarget === step.id ? 'rework' : 'next';
  return {
    type: 'event',
    kind: 'agent.handoff',
    from,
    to: step.agent,
    data: {
      step: step.id,
      round: context.round,
      reason,
      ...(context.joined === undefined ? {} : { join: context.joined }),
      ...placed(place.within),
    },
  };
}

/** The task's failure reason for a step that could not be run, from the code of the error its call threw. */
function callFailureReason(error: unknown): TaskFailureReason {
  const code = StepErrorCode.safeParse(
    typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined,
  );
  return taskFailureReason(code.data, 'call');
}
