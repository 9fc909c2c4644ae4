import type { ReusedSteps } from '@troupe/client';
import type {
  AgentStepReply,
  AgentStepRequest,
  EventKind,
  InputCut,
  StepOutput,
  TaskFailureReason,
  TaskOriginRef,
  TaskParent,
  TaskSubmission,
  UsageTotals,
  ValueRef,
  WorkspaceChanges,
  WorkspaceManifest,
} from '@troupe/protocol';

/**
 * The final states of every workflow; step ids may not use them. `released` ends this process's run of the task
 * without ending the task (see {@link WorkflowEvent}); it is never checkpointed.
 */
export const FINAL_STATES = ['completed', 'failed', 'cancelled', 'released'] as const;

/** What a workflow actor starts from: one task. */
export interface WorkflowInput {
  taskId: string;
  pipeline: string;
  goal: string;
  input?: Record<string, unknown>;
  /** The keys of `input` cut to previews of the task's stored input, and where the whole is. */
  inputCut?: InputCut;
  metadata?: Record<string, string>;
  traceparent: string;
  /** End of the task's wall-clock budget, ms since the epoch. */
  deadline?: number;
  /** The task whose `pipeline` step runs this one. */
  parent?: TaskParent;
  /** The ended task this one restarts or forks (see `workflow/reusedStep.ts`). */
  origin?: TaskOriginRef;
  /** A restart's or fork's step outputs from its origin, by step run: those steps are not run again. */
  reuse?: ReusedSteps;
  /**
   * A restart's or fork's workspace files from its origin, as the step it runs from first started there: the
   * workflow's manifest starts as this (and keeps it in its context, not here).
   */
  workspace?: WorkspaceManifest;
}

/** What the injected `runPipeline` actor is given: the sub-task to submit, where, and how long it may take. */
export interface PipelineRunInput {
  pipeline: string;
  task: TaskSubmission & { id: string; parent: TaskParent };
  /** The keys of the sub-task's input that hold previews of its parent's stored input, read whole before it goes. */
  inputCut?: InputCut;
  timeoutMs: number;
  /** The sub-task's end from the task's origin: no sub-task is submitted (see `reusedStep.ts`). */
  reused?: PipelineRunOutput;
}

/** How a sub-task ended: its output, or why it did not complete. */
export type PipelineRunOutput =
  | { ok: true; output: string; outputRef?: ValueRef; usage: UsageTotals; durationMs: number; reused?: true }
  | { ok: false; code: string; message: string; usage: UsageTotals; durationMs: number };

/** What the injected `runStep` actor is given: the request for the agent and how long it may take. */
export interface StepRunInput {
  request: AgentStepRequest;
  timeoutMs: number;
  /** This run is the task's first delivery: a step it sends for the first time has never run (see `fresh`). */
  firstDelivery?: boolean;
  /** The task's held time counts against its deadline (`budget.pausedTimeCounts`): the deadline is not moved on. */
  pausedTimeCounts?: boolean;
  /** The step's reply from the task's origin: the step is reused, not sent (see `reusedStep.ts`). */
  reused?: StepRunOutput;
}

/** What the injected `askPerson` actor is given: the question for a `human` step and how long a person has. */
export interface HumanRunInput {
  taskId: string;
  pipeline: string;
  step: string;
  /** `<taskId>.<step>.<round>`, as for an agent step: the question's journal key is made from it. */
  stepId: string;
  prompt: string;
  timeoutMs: number;
  /** A JSON Schema the answer must match, as JSON. */
  answer?: Record<string, unknown>;
  traceparent: string;
  /** The answer from the task's origin: nobody is asked (see `reusedStep.ts`). */
  reused?: HumanRunOutput;
}

/** A person's answer (its text, and who gave it), or why there is none; `reused` when it is the task's origin's. */
export type HumanRunOutput =
  | { ok: true; answer: string; by?: string; durationMs: number; reused?: true }
  | { ok: false; code: 'timeout' | 'invalid_answer'; message: string; durationMs: number };

/** The agent's reply and how long the step took; `reused` when it is the task's origin's (nothing ran). */
export type StepRunOutput = AgentStepReply & { durationMs: number; reused?: true };

export interface WorkflowFailure {
  /** Stable code; the protocol's `TaskFailureReason` says what each means. */
  reason: TaskFailureReason;
  message: string;
  step?: string;
}

export interface WorkflowContext {
  task: WorkflowInput;
  /** 1 + the number of rejections so far; part of every step id. */
  round: number;
  rejections: Record<string, number>;
  /** Latest output of each step, by step id: what this round's flow has produced so far. */
  latest: Record<string, StepOutput>;
  /** The outputs a rejection made stale (their steps run again), for each one's own next run to see. */
  previous?: Record<string, StepOutput>;
  feedback?: string | undefined;
  /** The step the last rejection sent the work back to, until it has run again. */
  reworkTarget?: string | undefined;
  lastAgent?: string;
  /** The parallel or foreach step that ended last, until an agent's step does: the next hand-off is from its join. */
  joined?: string | undefined;
  usage: UsageTotals;
  usageByAgent: Record<string, UsageTotals>;
  approved?: boolean;
  failure?: WorkflowFailure;
  /** Set when the task was cancelled, with the reason given, if any. */
  cancelled?: { reason?: string };
  /** Set when this run let the task go without ending it (see {@link WorkflowEvent}). */
  released?: { why: ReleaseReason };
  /** Retries made of a step, by `<step id>.<round>`. */
  attempts?: Record<string, number>;
  /** Failures that did not fail the task (a step's `onError: continue` or a jump), by step id. */
  errors?: Record<string, WorkflowFailure>;
  /** How each branch of a parallel step has ended so far, by step id and branch id (reset on entering the step). */
  branches?: Record<string, Record<string, BranchOutcome>>;
  /** Each foreach step's items and how far they have got, by step id (reset on entering the step). */
  foreach?: Record<string, ForeachProgress>;
  /** Set in the workflow of one item of a foreach step: which step, and which item of its list. */
  item?: { step: string; index: number };
  /**
   * The files of the task's workspace its steps have handed on so far (each step's changes applied in the order the
   * steps ended), sent with every step request; checkpointed with the rest, so a resumed task has them.
   */
  workspace?: WorkspaceManifest;
  /** In an item's workflow: the task's workspace as the item started, which its changes are counted from. */
  itemBase?: WorkspaceManifest;
  /** In an item's workflow: what the task had spent when the item started, which its budgets count too. */
  spent?: { usage: UsageTotals; byAgent: Record<string, UsageTotals> };
  /**
   * A step may have asked a person under this task (an approval, a question): set as a step is left unless its own
   * reply says it asked nobody (`askedPeople: false`), and by every `human` step. The task's end reads the task's
   * requests to close them only when this is set, or the task ran over more than one delivery.
   */
  askedPeople?: true;
}

/** A foreach step's items, how many have been started (in list order), and how each that ended did. */
export interface ForeachProgress {
  items: unknown[];
  started: number;
  /** By item: how it ended, or null while it has not. */
  results: (ItemOutcome | null)[];
  /** Why the list could not be run (not a list, too long), when it could not. */
  problem?: WorkflowFailure;
}

/** How one item of a foreach step ended: the output of its last step of work, or why it failed. */
export type ItemOutcome = { ok: true; output: string } | { ok: false; failure: WorkflowFailure };

/** What an item's workflow ends with: its outcome and what it spent. */
export type ItemOutput = ItemOutcome & {
  usage: UsageTotals;
  usageByAgent: Record<string, UsageTotals>;
  /** What the item's steps changed in the task's workspace. */
  workspace?: WorkspaceChanges;
  /** A step of the item may have asked a person (see {@link WorkflowContext.askedPeople}). */
  askedPeople?: true;
};

/** How a branch of a parallel step ended: done, or failed with why. */
export type BranchOutcome = { ok: true } | { ok: false; failure: WorkflowFailure };

/**
 * Why a run lets its task go without ending it: this process is shutting down (the task is handed back, to resume
 * from its last checkpoint), another coordinator took the task over, or the run cannot checkpoint (the runner
 * records the failure itself).
 */
export type ReleaseReason = 'shutdown' | 'takenOver' | 'checkpointFailed';

/**
 * What the workflow actor receives from outside: a person cancelling the task (over NATS), and its runner letting
 * the task go (`release`). Both end the step in progress, whose call to the agent stops with it.
 */
export type WorkflowEvent =
  | { type: 'cancel'; reason?: string }
  | { type: 'release'; why: ReleaseReason }
  /** An event an item's workflow emitted, passed up to be emitted by the task's. */
  | { type: 'item.said'; event: WorkflowEmitted }
  /** An item's workflow had ended when the task's was checkpointed, before the task's took its end (restored). */
  | { type: 'item.ended'; id: string; output?: ItemOutput; error?: unknown };

/** A workflow's result once it reaches a final state; `released` is no ending of the task. */
export interface WorkflowOutput {
  status: 'completed' | 'failed' | 'cancelled' | 'released';
  /** The last work step's output, or its preview when `outputRef` says where the whole is kept. */
  output: string;
  outputRef?: ValueRef;
  approved: boolean | undefined;
  rounds: number;
  usage: UsageTotals;
  usageByAgent: Record<string, UsageTotals>;
  failure?: WorkflowFailure;
  /** Why it was cancelled, when the person who cancelled it said. */
  cancelReason?: string;
  /** Why the run let the task go, when it did. */
  released?: ReleaseReason;
  /** A step may have asked a person (see {@link WorkflowContext.askedPeople}). */
  askedPeople?: true;
}

/** The output of a workflow that ended its task: any final state but `released`. */
export type TaskOutput = WorkflowOutput & { status: 'completed' | 'failed' | 'cancelled' };

/** Whether the workflow ended its task (it was not released). */
export const endedTask = (output: WorkflowOutput): output is TaskOutput => output.status !== 'released';

/** An event for the wire, without id, time and trace: the host adds those. */
export interface WorkflowEmitted {
  type: 'event';
  kind: EventKind;
  data: Record<string, unknown>;
  from?: string;
  to?: string;
}
