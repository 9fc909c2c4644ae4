import { z } from 'zod';
import { HumanRequest } from '../control.ts';
import { Name, TaskId } from '../names.ts';
import { FlowGraph } from '../pipelineRegistration.ts';
import { TaskFields, TaskOriginRef } from '../task.ts';
import { UsageTotals } from '../usage.ts';
import { ValueRef } from '../valueRef.ts';
import { SessionSummary } from './sessionRecord.ts';

/**
 * The gateway's HTTP request and response bodies: validated on the way in, and the source of its OpenAPI document.
 */

export const ErrorBody = z
  .object({
    error: z.object({
      /** Machine-readable: `invalid_request`, `unauthenticated`, `forbidden`, `not_found`, `conflict`, … */
      code: z.string(),
      message: z.string(),
      /** For `invalid_request`: each problem, with where it is. */
      issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    }),
  })
  .meta({ id: 'Error' });
export type ErrorBody = z.infer<typeof ErrorBody>;

export const PipelineParams = z.object({ name: Name });
export type PipelineParams = z.infer<typeof PipelineParams>;
export const TaskParams = z.object({ id: TaskId });
export type TaskParams = z.infer<typeof TaskParams>;
export const RequestParams = z.object({ id: z.string().min(1).max(200) });
export type RequestParams = z.infer<typeof RequestParams>;

/**
 * A task as a client submits it: a task without `parent`, which only a pipeline step sets (a client's would tie its
 * task to the end of another's, and tell it how that one ended). One that has it is refused, saying so.
 */
export const ClientTask = z.strictObject(TaskFields.omit({ parent: true, inputRef: true }).shape, {
  error: (issue) =>
    issue.code === 'unrecognized_keys' && issue.keys.includes('parent')
      ? 'parent: set by a pipeline step, never by a client'
      : undefined,
});
export type ClientTask = z.infer<typeof ClientTask>;

/** A task to submit: its goal, and optionally input, metadata and an id of the client's choosing. */
export const SubmitBody = ClientTask.meta({ id: 'SubmitTask' });
export type SubmitBody = z.infer<typeof SubmitBody>;

export const SubmitQuery = z.object({
  /** Wait up to this many seconds for the task to end, and answer with its result when it does. */
  wait: z.coerce.number().min(0).max(300).optional(),
});
export type SubmitQuery = z.infer<typeof SubmitQuery>;

export const TaskStatus = z.enum(['submitted', 'running', 'completed', 'failed', 'cancelled']);
export type TaskStatus = z.infer<typeof TaskStatus>;

/**
 * Run a failed or cancelled task again from step `from`, as a new task linked to it: the steps that completed before
 * `from` first started are reused, not run again.
 */
/** `newest`: run the new task on the pipeline's newest version, not the one the original ran on. */
const Newest = z.literal(true).optional();

export const RestartBody = z
  .strictObject({
    from: z.string().min(1).max(64),
    newest: Newest,
    by: z.string().min(1).max(100).optional(),
  })
  .meta({ id: 'Restart' });
export type RestartBody = z.infer<typeof RestartBody>;

/**
 * Start a new task from an ended one at step `at`: with another `input`, and/or the reused outputs of steps before
 * `at` replaced (`set`, by step id); `at` and everything after it runs, seeing the edits.
 */
export const ForkBody = z
  .strictObject({
    at: z.string().min(1).max(64),
    input: z.record(z.string(), z.unknown()).optional(),
    set: z.record(z.string().min(1).max(64), z.string().max(100_000)).optional(),
    newest: Newest,
    by: z.string().min(1).max(100).optional(),
  })
  .meta({ id: 'Fork' });
export type ForkBody = z.infer<typeof ForkBody>;

/** The new task a restart or fork made (`202`: submitted, not yet run), and the one it came from. */
export const FamilyResult = z
  .object({
    taskId: TaskId,
    origin: z.object({ taskId: TaskId, kind: z.enum(['restart', 'fork']), step: z.string() }),
  })
  .meta({ id: 'FamilyResult' });
export type FamilyResult = z.infer<typeof FamilyResult>;

/** Where a task was paused: since when, by whom (with the token's name), why. */
export const TaskPaused = z.object({
  since: z.string(),
  by: z.string().optional(),
  reason: z.string().optional(),
});
export type TaskPaused = z.infer<typeof TaskPaused>;

/** Where a task stands, from its record; with its result once it has ended. */
export const TaskView = z
  .object({
    taskId: TaskId,
    pipeline: Name,
    goal: z.string(),
    /** The task's labels; `session` names the gateway session it belongs to. */
    metadata: z.record(z.string(), z.string()).optional(),
    status: TaskStatus,
    /** The workflow's state: the step it is at, or how it ended. */
    state: z.string().optional(),
    /** The hash of the pipeline version the task runs on (absent for a task from before versions were kept). */
    version: z.string().optional(),
    round: z.number().int().optional(),
    usage: UsageTotals.optional(),
    createdAt: z.string().optional(),
    updatedAt: z.string().optional(),
    /** What its current step is doing (an agent working, waiting on its model, on a person, or on a worker). */
    activity: z.record(z.string(), z.unknown()).optional(),
    /** Set while a person holds the running task (`status` stays `running`): resume it to let it go on. */
    paused: TaskPaused.optional(),
    /** The ended task this one was restarted or forked from, and the step it runs on from. */
    origin: TaskOriginRef.optional(),
    /** The final output of a completed task: whole for a single task, a preview in a list when `outputRef` is set. */
    output: z.unknown().optional(),
    /** Where the whole output is kept, when `output` is only its preview (in a list of tasks). */
    outputRef: ValueRef.optional(),
    /** Why a failed task failed. */
    failure: z.object({ reason: z.string(), message: z.string() }).optional(),
    /** Each agent step, from the task's events (`?steps=true` on a single task). */
    steps: z
      .array(
        z.object({
          stepId: z.string(),
          step: z.string(),
          agent: z.string(),
          round: z.number(),
          ok: z.boolean().optional(),
          verdict: z.string().optional(),
          error: z.string().optional(),
          durationMs: z.number().optional(),
          usage: UsageTotals.optional(),
        }),
      )
      .optional(),
    /** The second submit of a known id: nothing was run again. */
    duplicate: z.boolean().optional(),
    links: z.object({ self: z.string(), events: z.string() }),
  })
  .meta({ id: 'Task' });
export type TaskView = z.infer<typeof TaskView>;

/**
 * A status to list tasks by: one a task's `status` says, or `paused`, the running tasks a person holds (their status
 * stays `running`, so `running` lists them too).
 */
export const TaskListStatus = z.enum([...TaskStatus.options, 'paused']);
export type TaskListStatus = z.infer<typeof TaskListStatus>;

export const TaskListQuery = z.object({
  pipeline: Name.optional(),
  status: TaskListStatus.optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** Where the previous page ended (its `next`). */
  cursor: z.string().max(200).optional(),
});
export type TaskListQuery = z.infer<typeof TaskListQuery>;

export const TaskList = z
  .object({
    tasks: z.array(TaskView),
    /** The cursor of the next page; absent on the last. */
    next: z.string().optional(),
  })
  .meta({ id: 'TaskList' });
export type TaskList = z.infer<typeof TaskList>;

export const TaskQuery = z.object({
  /** Include each step, read from the task's events. */
  steps: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});
export type TaskQuery = z.infer<typeof TaskQuery>;

export const CancelBody = z.object({ reason: z.string().max(2_000).optional() }).default({});
export type CancelBody = z.infer<typeof CancelBody>;

export const CancelResult = z.object({ taskId: TaskId, status: z.literal('cancelled') });
export type CancelResult = z.infer<typeof CancelResult>;

/** Who steers a task (pause, resume, tell), recorded beside the token's name. */
const SteeredBy = z.string().min(1).max(100).optional();

/** A pause: the step at work finishes its current model or tool call, then the task is held until a resume. */
export const PauseBody = z
  .strictObject({ reason: z.string().max(2_000).optional(), by: SteeredBy })
  .default({})
  .meta({ id: 'Pause' });
export type PauseBody = z.infer<typeof PauseBody>;

/** The pause is recorded: the task stays held across a restart of its coordinator, until it is resumed. */
export const PauseResult = z
  .object({ taskId: TaskId, status: z.literal('paused') })
  .meta({ id: 'PauseResult' });
export type PauseResult = z.infer<typeof PauseResult>;

export const ResumeBody = z.strictObject({ by: SteeredBy }).default({}).meta({ id: 'Resume' });
export type ResumeBody = z.infer<typeof ResumeBody>;

export const ResumeResult = z
  .object({ taskId: TaskId, status: z.literal('running') })
  .meta({ id: 'ResumeResult' });
export type ResumeResult = z.infer<typeof ResumeResult>;

/** A person's message for the agent at work, read before its next model call (by the next agent step when none is). */
export const TellBody = z
  .strictObject({ text: z.string().trim().min(1, 'must not be empty').max(100_000), by: SteeredBy })
  .meta({ id: 'Tell' });
export type TellBody = z.infer<typeof TellBody>;

/** The message is recorded; its id is the one the task's `task.told` and `agent.told` events name. */
export const TellResult = z.object({ taskId: TaskId, messageId: z.string() }).meta({ id: 'TellResult' });
export type TellResult = z.infer<typeof TellResult>;

export const EventsQuery = z.object({
  /** `troupe` (default): Troupe's own events. `ag-ui`: the same flow as AG-UI events. */
  format: z.enum(['troupe', 'ag-ui']).default('troupe'),
  /** Resume after this stream sequence (what `Last-Event-ID` says, for clients that cannot set headers). */
  after: z.coerce.number().int().nonnegative().optional(),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

export const ApprovalsQuery = z.object({
  /** Every request, decided ones included; only pending ones by default. */
  all: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
  taskId: TaskId.optional(),
});
export type ApprovalsQuery = z.infer<typeof ApprovalsQuery>;

export const ApprovalList = z.object({ requests: z.array(HumanRequest) }).meta({ id: 'HumanRequestList' });
export type ApprovalList = z.infer<typeof ApprovalList>;

/** A decision on an approval, or an answer to a question. */
export const DecisionBody = z
  .union([
    z.strictObject({
      decision: z.enum(['allow', 'deny']),
      /** Required to deny: the agent is told why. */
      reason: z.string().min(1).max(10_000).optional(),
      /** Who decided, recorded beside the token's name. */
      by: z.string().min(1).max(100).optional(),
    }),
    z.strictObject({ answer: z.string().min(1).max(100_000), by: z.string().min(1).max(100).optional() }),
  ])
  .meta({ id: 'Decision' });
export type DecisionBody = z.infer<typeof DecisionBody>;

export const DecisionResult = z
  .object({
    id: z.string(),
    taskId: TaskId,
    agent: z.string(),
    /**
     * The request's status as recorded: `allowed`, `denied` or `answered`. The step waiting on it goes on at once; one
     * not waiting right now takes it when its task resumes.
     */
    outcome: z.enum(['allowed', 'denied', 'answered']),
    by: z.string(),
  })
  .meta({ id: 'DecisionResult' });
export type DecisionResult = z.infer<typeof DecisionResult>;

export const Health = z.object({
  ok: z.boolean(),
  nats: z.enum(['connected', 'reconnecting', 'closed']),
  jetstream: z.enum(['ok', 'unreachable']).optional(),
  streams: z.enum(['ok', 'missing']).optional(),
  /** With `/readyz?pipeline=`: whether a coordinator has served each pipeline named. */
  pipelines: z.enum(['ok', 'missing']).optional(),
  message: z.string().optional(),
});
export type Health = z.infer<typeof Health>;

export const ReadyQuery = z.object({
  /** Ready only once a coordinator has served each of these pipelines (repeat it, or separate names by commas). */
  pipeline: z.union([z.string(), z.array(z.string())]).optional(),
});
export type ReadyQuery = z.infer<typeof ReadyQuery>;

export const SessionParams = z.object({
  id: z.string().regex(/^[A-Za-z0-9_-]{1,48}$/, 'a session id: letters, digits, _ and -, at most 48'),
});
export type SessionParams = z.infer<typeof SessionParams>;

export const OpenSessionBody = z
  .strictObject({
    pipeline: Name,
    /** The session's id; one is made when absent. */
    id: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,48}$/, 'letters, digits, _ and -, at most 48')
      .optional(),
  })
  .meta({ id: 'OpenSession' });
export type OpenSessionBody = z.infer<typeof OpenSessionBody>;

export const SessionMessageBody = ClientTask.pick({ goal: true, input: true, metadata: true }).meta({
  id: 'SessionMessage',
});
export type SessionMessageBody = z.infer<typeof SessionMessageBody>;

export const SessionView = z
  .object({
    id: z.string(),
    pipeline: Name,
    createdBy: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
    /** Each message's task, oldest first, as it stands now. */
    turns: z.array(
      z.object({
        taskId: TaskId,
        goal: z.string(),
        at: z.string(),
        status: z.enum(['submitted', 'running', 'completed', 'failed', 'cancelled']),
        output: z.unknown().optional(),
        failure: z.object({ reason: z.string(), message: z.string() }).optional(),
      }),
    ),
    /** The summary of the older turns a follow-up sees in place of them, written by the summarizer agent. */
    summary: SessionSummary.optional(),
  })
  .meta({ id: 'Session' });
export type SessionView = z.infer<typeof SessionView>;

export const SessionList = z.object({ sessions: z.array(SessionView.omit({ turns: true, summary: true })) });
export type SessionList = z.infer<typeof SessionList>;

export const SessionListQuery = z.object({ pipeline: Name.optional() });
export type SessionListQuery = z.infer<typeof SessionListQuery>;

export const AllEventsQuery = z.object({
  pipeline: Name.optional(),
  /** Resume after this stream sequence (what `Last-Event-ID` says). */
  after: z.coerce.number().int().nonnegative().optional(),
});
export type AllEventsQuery = z.infer<typeof AllEventsQuery>;

export const PipelineList = z
  .object({
    pipelines: z.array(
      z.object({
        name: Name,
        description: z.string().optional(),
        agents: z.array(Name),
        steps: z.array(z.string()),
        /**
         * The flow: each step a node (with the parallel step and branch it runs in, and its condition), each way the
         * work can go an edge (`to: "end"` ends the task) — as `troupe graph --json` prints it.
         */
        graph: FlowGraph.optional(),
        registeredAt: z.string(),
      }),
    ),
  })
  .meta({ id: 'PipelineList' });
export type PipelineList = z.infer<typeof PipelineList>;

/** The token a request came with, so a page offers only what it may do (a refusal still says why). */
export const TokenInfo = z
  .object({
    name: z.string(),
    scopes: z.array(z.enum(['read', 'submit', 'approve', 'admin'])),
    /** The pipelines it may touch; every one when absent. */
    pipelines: z.array(z.string()).optional(),
  })
  .meta({ id: 'TokenInfo' });
export type TokenInfo = z.infer<typeof TokenInfo>;

/** A task as a tree: steps, model calls, tool calls, approvals, with totals (as `troupe trace --json` prints it). */
export const TaskTrace = z.unknown();
export type TaskTrace = z.infer<typeof TaskTrace>;

/** The answer to a resumed event stream of an ended task with nothing after `Last-Event-ID`. */
export const NoMoreEvents = z.null().describe('the task has ended and nothing came after Last-Event-ID');
export type NoMoreEvents = z.infer<typeof NoMoreEvents>;
