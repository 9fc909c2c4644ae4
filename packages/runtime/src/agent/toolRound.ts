import { enqueueActions } from 'xstate';
import type { ApprovalAsk } from '../approvals/approvalAsk.ts';
import type { AgentContext } from './agentContext.ts';
import { toolRunnerFailed } from './agentFailures.ts';
import { servicesOf } from './agentServices.ts';
import { agentSetup } from './agentSetup.ts';

/**
 * The tools' side of a step: the calls a reply asked for, announced and checked by the policy (`acting`), those it
 * asks a person about decided (`awaitingApproval`), then run (`running`); their results join the conversation and the
 * model is asked again (`deciding`, the model round).
 */

/** The reply's calls announced as `tool.call`, and each checked by the policy before it runs. */
const acting = agentSetup.createStateConfig({
  entry: enqueueActions(({ context, enqueue }) => {
    for (const [index, call] of context.pendingCalls.entries()) {
      enqueue.emit({
        type: 'tool.call',
        turn: context.turn,
        index,
        callId: call.id,
        tool: call.name,
        arguments: call.arguments,
      });
    }
  }),
  invoke: {
    src: 'checkTools',
    input: ({ context }) => ({ calls: context.pendingCalls, ...servicesOf(context) }),
    onDone: [
      {
        guard: { type: 'needsApproval', params: ({ event }) => event.output },
        target: 'awaitingApproval',
        actions: { type: 'recordChecks', params: ({ event }) => event.output },
      },
      { target: 'running', actions: { type: 'recordChecks', params: ({ event }) => event.output } },
    ],
    onError: {
      target: '#agent.failed',
      actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
    },
  },
});

/** The calls the policy asks a person about, waiting for their decisions. */
const awaitingApproval = agentSetup.createStateConfig({
  invoke: {
    src: 'awaitApprovals',
    input: ({ context }) => ({ calls: askCalls(context), turn: context.turn, ...servicesOf(context) }),
    onDone: {
      target: 'running',
      actions: { type: 'recordApprovals', params: ({ event }) => event.output },
    },
    onError: {
      target: '#agent.failed',
      actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
    },
  },
});

/** The calls run, with the decisions people gave; their results, announced as `tool.result`, join the conversation. */
const running = agentSetup.createStateConfig({
  invoke: {
    src: 'runTools',
    input: ({ context }) => ({
      calls: context.pendingCalls,
      turn: context.turn,
      ...(Object.keys(context.approvals).length > 0 ? { approvals: context.approvals } : {}),
      ...servicesOf(context),
    }),
    onDone: {
      target: 'deciding',
      actions: [
        { type: 'recordToolResults', params: ({ event }) => event.output },
        enqueueActions(({ context, event, enqueue }) => {
          for (const [index, result] of event.output.entries())
            enqueue.emit({ type: 'tool.result', turn: context.turn, index, ...result });
        }),
      ],
    },
    onError: {
      target: '#agent.failed',
      actions: { type: 'fail', params: ({ context, event }) => toolRunnerFailed(context, event.error) },
    },
  },
});

/** The pending calls the policy said to ask a person about, as they are asked. */
function askCalls(context: AgentContext): ApprovalAsk[] {
  return context.checks.flatMap((check) => {
    const index = context.pendingCalls.findIndex((c) => c.id === check.callId);
    const call = context.pendingCalls[index];
    return check.decision === 'ask' && call
      ? [{ callId: call.id, index, tool: call.name, arguments: call.arguments, reason: check.reason }]
      : [];
  });
}

/** The tool round's states, children of the machine's `working`. */
export const toolRound = { acting, awaitingApproval, running };
