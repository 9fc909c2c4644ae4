import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { ToolCall } from '@troupe/llm';
import type { ApprovalDecision, ToolResult } from '@troupe/protocol';
import type { HumanRequestOptions, HumanScope } from '../approvals/humanGate.ts';
import { StepJournal, type ToolCallRecord } from '../durable/stepJournal.ts';
import { ToolExecutor } from '../tools/toolExecutor.ts';
import type { AgentServices, ApprovalAsk } from './agentMachine.ts';
import type { RecordedReplies } from './recordedReplies.ts';
import { type StepContext, unlessUnavailable } from './stepContext.ts';
import { endApprovalSpan, endToolSpan, startApprovalSpan, startToolSpan } from './stepTracing.ts';

/** The directory a task's file tools are confined to. */
export const taskWorkspace = (root: string, pipeline: string, taskId: string): string =>
  join(root, pipeline, taskId);

/** The tool calls of a step's agent actor: their check, the approvals they wait on, and their runs. */
export type ToolServices = Required<Pick<AgentServices, 'checkTools' | 'awaitApprovals' | 'runTools'>>;

/**
 * The agent's tool calls, journaled, and the people asked about them: the policy's check, approvals, and each
 * call run at most once across runs of the step. `stopped` is aborted, with the reason, when the step stops: what
 * waits on a person records why it stopped waiting.
 */
export function stepTools(step: StepContext, replies: RecordedReplies, stopped: AbortSignal): ToolServices {
  const { agent, deps, request, scope } = step;
  const withReason = (signal: AbortSignal) => AbortSignal.any([stopped, signal]);
  const workspace = taskWorkspace(deps.workspaceRoot, request.pipeline, request.taskId);
  /** Made when the first call runs: an agent that calls no tool never makes it. */
  let workspaceMade: Promise<unknown> | undefined;
  const human = deps.human;
  const values = deps.values;
  /**
   * The turn each tool call was asked for in, and its position in it, for its progress events and the journal key
   * of the questions it asks.
   */
  const callTurns = new Map<string, { turn: number; index: number }>();
  /** The journal key of the questions a tool call asks; undefined for a call this run has not started. */
  const questionKey = (callId: string | undefined): string | undefined => {
    const at = callTurns.get(callId ?? '');
    return at === undefined
      ? undefined
      : StepJournal.humanKey(StepJournal.toolKey(request.stepId, at.turn, at.index), 'question');
  };
  /** This run of the step, as the journal knows its claims. */
  const runId = randomUUID();
  const humanScope: HumanScope = {
    ...scope,
    agent: agent.name,
    stepId: request.stepId,
    ...(agent.approvalTimeoutMs === undefined ? {} : { timeoutMs: agent.approvalTimeoutMs }),
  };
  const executor = new ToolExecutor({
    registry: deps.registry,
    policy: { tools: agent.tools, rules: agent.rules },
    agent: agent.name,
    workspace,
    taskId: request.taskId,
    ...(values
      ? { keepWhole: (name: string, whole: string) => values.store(request.pipeline, name, whole) }
      : {}),
    onProgress: (callId, tool, update) => {
      // Progress that cannot be published is lost, never the call.
      try {
        deps.publish(
          deps.events.make(
            'tool.progress',
            scope,
            {
              agent: agent.name,
              stepId: request.stepId,
              ...callTurns.get(callId),
              callId,
              tool,
              ...update,
            },
            { from: `tool:${tool}`, to: agent.name },
          ),
        );
      } catch (error) {
        deps.logger?.error(
          { err: error, stepId: request.stepId },
          'cannot publish tool.progress; the step goes on',
        );
      }
    },
    ...(human
      ? {
          human: {
            ask: (question, signal, callId) =>
              askOnce(step, questionKey(callId), (options) =>
                human.ask(question, humanScope, withReason(signal), options),
              ),
          },
        }
      : {}),
    ...(deps.memory
      ? {
          memory: deps.memory.view({
            pipeline: request.pipeline,
            agent: agent.name,
            taskId: request.taskId,
            longTerm: agent.longTermMemory === true,
          }),
        }
      : {}),
  });
  return {
    checkTools: (input) => Promise.all(input.calls.map((call) => executor.check(call))),
    awaitApprovals: async (input, signal) => {
      const decide = async (ask: ApprovalAsk): Promise<[string, ApprovalDecision]> => {
        if (!human) return [ask.callId, { decision: 'deny', reason: 'nobody can approve calls here' }];
        const span = startApprovalSpan(step, ask.tool, ask.callId);
        try {
          const decision = await askOnce(
            step,
            StepJournal.humanKey(StepJournal.toolKey(request.stepId, input.turn, ask.index), 'approval'),
            (options) => human.approve(ask, humanScope, withReason(signal), options),
          );
          endApprovalSpan(span, { decision });
          return [ask.callId, decision];
        } catch (error) {
          endApprovalSpan(span, { error });
          throw error;
        }
      };
      return Object.fromEntries(await Promise.all(input.calls.map(decide)));
    },
    runTools: async (input, signal) => {
      workspaceMade ??= mkdir(workspace, { recursive: true });
      await workspaceMade;
      const ran = await Promise.all(
        input.calls.map((call, index) => {
          const key = StepJournal.toolKey(request.stepId, input.turn, index);
          callTurns.set(call.id, { turn: input.turn, index });
          const expectNew = replies.madeHere(input.turn);
          const claim = { key, runId, expectNew, turn: input.turn };
          return runOnce(step, executor, claim, call, signal, input.approvals?.[call.id]);
        }),
      );
      if (ran.length > 0 && ran.every((call) => call.claimed === 'new')) replies.claimedAllNew(input.turn);
      return ran.map((call) => call.result);
    },
  };
}

/**
 * Runs a call unless the journal shows it already ran (the step is running again after a crash): then its
 * recorded result stands in, marked `journaled`, and nothing runs twice. The call is claimed in the journal
 * before it runs and its result recorded before the agent moves on. A call that was claimed and never
 * recorded (its process died mid-call) is in doubt: it runs again only when its tool is safe to repeat;
 * otherwise the model is told it may or may not have taken effect. Returns the result with what the claim found.
 */
async function runOnce(
  step: StepContext,
  executor: ToolExecutor,
  claim: { key: string; runId: string; expectNew: boolean; turn: number },
  call: ToolCall,
  signal: AbortSignal,
  approval: ApprovalDecision | undefined,
): Promise<{ result: ToolResult; claimed: ToolCallRecord['state'] | undefined }> {
  const { deps } = step;
  const journal = deps.journal;
  const now = () => new Date(deps.clock.now());
  const { key, runId, turn } = claim;
  const record = await unlessUnavailable(() =>
    journal?.claimToolCall(key, call.name, call.arguments, runId, now(), { expectNew: claim.expectNew }),
  );
  if (record?.state === 'done') {
    const { error, truncated, outputRef, ...rest } = record.result;
    const result: ToolResult = {
      ...rest,
      ...(error ? { error } : {}),
      ...(truncated ? { truncated } : {}),
      ...(outputRef ? { outputRef } : {}),
      callId: call.id,
      tool: call.name,
      durationMs: 0,
      journaled: true,
    };
    return { result, claimed: record.state };
  }
  if (record?.state === 'in_doubt' && !deps.registry.get(call.name)?.rerunnable) {
    // All the journal knows: another run claimed the call and recorded no result. That run may have died, or may
    // still be running it (it was thought dead: its heartbeats did not arrive).
    const message =
      `another run of this step claimed this ${call.name} call (at ${record.startedAt ?? 'an unknown time'}) ` +
      'and has not recorded its result; whether it finished is unknown, so it was not run again here. ' +
      'Check its effect before repeating it.';
    // The model sees a tool result's output: the explanation goes there, as for every other tool error.
    const result: ToolResult = {
      callId: call.id,
      tool: call.name,
      ok: false,
      output: message,
      decision: approval?.decision ?? 'allow',
      error: { code: 'in_doubt', message },
      durationMs: 0,
    };
    await unlessUnavailable(() => journal?.recordToolResult(key, call.arguments, result, now()));
    return { result, claimed: record.state };
  }
  const span = startToolSpan(step, call, turn);
  // Named by its journal key: a call run again (its result never recorded) keeps its whole under the same name.
  const result = await executor.execute(call, signal, approval, `${key}.result`);
  endToolSpan(span, result);
  if (journal && !signal.aborted)
    await unlessUnavailable(() => journal.recordToolResult(key, call.arguments, result, now()));
  return { result, claimed: record?.state };
}

/**
 * Journals the id of what a person is asked about a tool call when it is asked, so a run of the step that
 * resumes after a crash waits on the same approval or question — and takes a decision that was recorded while
 * no process waited — instead of asking again.
 */
async function askOnce<T>(
  { deps, asked }: StepContext,
  key: string | undefined,
  ask: (options: HumanRequestOptions) => Promise<T>,
): Promise<T> {
  // Before anything is asked: a run that stops while asking may have left a request for the task's end to close.
  asked.people = true;
  const journal = deps.journal;
  if (!journal || key === undefined) return ask({});
  const id = await unlessUnavailable(() => journal.humanRequest(key));
  return ask({
    ...(id === undefined ? {} : { id }),
    onAsked: async (requestId) => {
      await unlessUnavailable(() => journal.recordHumanRequest(key, requestId, new Date(deps.clock.now())));
    },
  });
}
