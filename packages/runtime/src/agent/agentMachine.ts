import { and, assign, not } from 'xstate';
import type { ApprovalAsk } from '../approvals/approvalAsk.ts';
import { agentOutput, initialContext } from './agentContext.ts';
import { timeLimit } from './agentLimits.ts';
import { agentSetup } from './agentSetup.ts';
import { modelRound } from './modelRound.ts';
import type { OutputSpec } from './structuredReply.ts';
import { toolRound } from './toolRound.ts';

export type {
  AgentActorInput,
  AgentContext,
  AgentEmitted,
  AgentEvent,
  AgentFailure,
  AgentMachineInput,
  AgentOutput,
  StepStop,
  WokenStep,
} from './agentContext.ts';
export type {
  AgentServices,
  ApprovalsInput,
  CallDecision,
  CompactionInput,
  ModelCallInput,
  ModelCallOutput,
  RunToolsInput,
} from './agentServices.ts';
export type { ApprovalAsk, OutputSpec };

/**
 * The agent actor: `thinking` (a model call) → `acting` (the tool calls it asked for) → … → `done` | `failed`,
 * or `stopped` on a `stop` event or when its time runs out. A stop first tells the services why (so a person's
 * pending request records it), then leaves `working`, which stops what the step had invoked; the output says what
 * the step spent until then. Model and tools come from the input's `AgentServices` (or
 * `agentMachine.provide({ actors })` in tests), so the machine is pure and runs in memory in tests. Its rounds are
 * in `modelRound.ts` and `toolRound.ts`, its parts in `agentSetup.ts`.
 */
export const agentMachine = agentSetup.createMachine({
  id: 'agent',
  context: ({ input }) => initialContext(input),
  initial: 'working',
  states: {
    working: {
      initial: 'starting',
      on: {
        stop: { actions: { type: 'halt', params: ({ event }) => event.stop } },
        pause: { actions: assign({ paused: true }) },
        // Raised by `halt` only, after the failure was decided; sent from outside without one, it is ignored.
        halted: { guard: 'failureDecided', target: 'stopped' },
      },
      after: {
        // Once its task is paused, the step's time limit fails it no more: it stops at its next call boundary, and the
        // workflow, which holds it, sends it again with the time left (or ends a task past its deadline) on resume.
        timeLimit: {
          guard: and(['timeLimited', not('pauseAsked')]),
          actions: {
            type: 'halt',
            params: ({ context }) => timeLimit(context)?.stop ?? { why: 'deadline' },
          },
        },
      },
      states: {
        /** A new step decides on its first model call; a woken one goes on waiting on the call its parked actor made. */
        starting: { always: [{ guard: 'woken', target: 'woken' }, { target: 'deciding' }] },
        ...modelRound,
        ...toolRound,
      },
    },
    done: { type: 'final' },
    failed: { type: 'final' },
    /** Stopped before its end (see `StepStop`), or at a call boundary after a pause; `failure` says why. */
    stopped: { type: 'final' },
  },
  output: ({ context }) => agentOutput(context),
});
