import { FlowGraph, HumanRequest, Name, TaskFields, TaskId, UsageTotals, ValueRef } from '@troupe/protocol';
import { z } from 'zod';
import { SessionSummary } from './sessions.ts';

/**
 * The gateway's request and response bodies: validated on the way in, and the source of its OpenAPI document.
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

export const PipelineParams = z.object({ name: Name });
export const TaskParams = z.object({ id: TaskId });
export const RequestParams = z.object({ id: z.string().min(1).max(200) });

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

export const SubmitQuery = z.object({
  /** Wait up to this many seconds for the task to end, and answer with its result when it does. */
  wait: z.coerce.number().min(0).max(300).optional(),
});

export const TaskStatus = z.enum(['submitted', 'running', 'completed', 'failed', 'cancelled']);

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

export const TaskListQuery = z.object({
  pipeline: Name.optional(),
  status: z.enum(['running', 'completed', 'failed', 'cancelled']).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** Where the previous page ended (its `next`). */
  cursor: z.string().max(200).optional(),
});

export const TaskList = z
  .object({
    tasks: z.array(TaskView),
    /** The cursor of the next page; absent on the last. */
    next: z.string().optional(),
  })
  .meta({ id: 'TaskList' });

export const TaskQuery = z.object({
  /** Include each step, read from the task's events. */
  steps: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});

export const CancelBody = z.object({ reason: z.string().max(2_000).optional() }).default({});

export const CancelResult = z.object({ taskId: TaskId, status: z.literal('cancelled') });

export const EventsQuery = z.object({
  /** `troupe` (default): Troupe's own events. `ag-ui`: the same flow as AG-UI events. */
  format: z.enum(['troupe', 'ag-ui']).default('troupe'),
  /** Resume after this stream sequence (what `Last-Event-ID` says, for clients that cannot set headers). */
  after: z.coerce.number().int().nonnegative().optional(),
});

export const ApprovalsQuery = z.object({
  /** Every request, decided ones included; only pending ones by default. */
  all: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
  taskId: TaskId.optional(),
});

export const ApprovalList = z.object({ requests: z.array(HumanRequest) }).meta({ id: 'HumanRequestList' });

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

export const Health = z.object({
  ok: z.boolean(),
  nats: z.enum(['connected', 'reconnecting', 'closed']),
  jetstream: z.enum(['ok', 'unreachable']).optional(),
  streams: z.enum(['ok', 'missing']).optional(),
  /** With `/readyz?pipeline=`: whether a coordinator has served each pipeline named. */
  pipelines: z.enum(['ok', 'missing']).optional(),
  message: z.string().optional(),
});

export const ReadyQuery = z.object({
  /** Ready only once a coordinator has served each of these pipelines (repeat it, or separate names by commas). */
  pipeline: z.union([z.string(), z.array(z.string())]).optional(),
});

export const SessionParams = z.object({
  id: z.string().regex(/^[A-Za-z0-9_-]{1,48}$/, 'a session id: letters, digits, _ and -, at most 48'),
});

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

export const SessionMessageBody = ClientTask.pick({ goal: true, input: true, metadata: true }).meta({
  id: 'SessionMessage',
});

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

export const SessionList = z.object({ sessions: z.array(SessionView.omit({ turns: true, summary: true })) });

export const SessionListQuery = z.object({ pipeline: Name.optional() });

export const AllEventsQuery = z.object({
  pipeline: Name.optional(),
  /** Resume after this stream sequence (what `Last-Event-ID` says). */
  after: z.coerce.number().int().nonnegative().optional(),
});

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

/** The token a request came with, so a page offers only what it may do (a refusal still says why). */
export const TokenInfo = z
  .object({
    name: z.string(),
    scopes: z.array(z.enum(['read', 'submit', 'approve', 'admin'])),
    /** The pipelines it may touch; every one when absent. */
    pipelines: z.array(z.string()).optional(),
  })
  .meta({ id: 'TokenInfo' });
