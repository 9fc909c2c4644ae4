import { isName, isTaskId } from './names.ts';

/** The root token of every Troupe subject, so one NATS account can host other systems beside it. */
export const ROOT = 'troupe';

/** JetStream streams and KV buckets Troupe owns. */
export const STREAMS = { tasks: 'TASKS', events: 'EVENTS', deadLetters: 'DEADLETTER' } as const;
export const BUCKETS = {
  workflows: 'workflows',
  memory: 'memory',
  pipelines: 'pipelines',
  approvals: 'approvals',
  journal: 'journal',
  /** The gateway's sessions: follow-up goals and the tasks that ran them. */
  sessions: 'sessions',
  /**
   * Each pipeline version some task started on (key `<pipeline>.<hash>`): what a coordinator runs that task on,
   * whatever its own file says now.
   */
  versions: 'versions',
  /** Tasks submitted through the gateway and not claimed yet (key = task id), see {@link QueuedTask}. */
  queued: 'queued',
  /** The A2A server's push-notification configs (key `<taskId>.<configId>`) and how far each one's webhook got. */
  a2aPush: 'a2a-push',
} as const;

/**
 * The queue of A2A webhook deliveries the gateways share: a work-queue stream with one message per push config,
 * taken from one durable pull consumer (the gateway makes both; its role may, no other's).
 */
export const A2A_PUSH_QUEUE = { stream: 'A2A_PUSH', consumer: 'a2a-push' } as const;

/** Builders for every subject on the wire. Arguments are assumed valid names and ids. */
export const subjects = {
  task: (pipeline: string) => `${ROOT}.tasks.${pipeline}`,
  allTasks: `${ROOT}.tasks.>`,
  agent: (pipeline: string, agent: string) => `${ROOT}.agents.${pipeline}.${agent}`,
  /** Where the agent that summarizes a pipeline's sessions takes requests to fold older turns into a summary. */
  sessionSummary: (pipeline: string, agent: string) => `${ROOT}.agents.${pipeline}.${agent}.summarize`,
  event: (pipeline: string, taskId: string, kind: string) => `${ROOT}.events.${pipeline}.${taskId}.${kind}`,
  /** Where a batch of one task's events goes (see `EventBatch`): under the task's events, so its filters match. */
  eventBatch: (pipeline: string, taskId: string) => `${ROOT}.events.${pipeline}.${taskId}.batch`,
  taskEvents: (taskId: string, pipeline = '*') => `${ROOT}.events.${pipeline}.${taskId}.>`,
  /** Every task's events in one pipeline. */
  pipelineEvents: (pipeline: string) => `${ROOT}.events.${pipeline}.*.>`,
  allEvents: `${ROOT}.events.>`,
  /** Every task's events, but not `troupe.events._invalid`. */
  allTaskEvents: `${ROOT}.events.*.*.>`,
  /** Where messages that failed validation are reported when the sender asked for no reply. */
  invalid: `${ROOT}.events._invalid`,
  /** Where the step waiting on a person's decision or answer listens: pipeline first, so permissions can scope it. */
  approval: (pipeline: string, taskId: string, approvalId: string) =>
    `${ROOT}.approvals.${pipeline}.${taskId}.${approvalId}`,
  /** Every approval and question of a pipeline. */
  pipelineApprovals: (pipeline: string) => `${ROOT}.approvals.${pipeline}.*.*`,
  control: (taskId: string) => `${ROOT}.control.${taskId}`,
  /** Tasks given up on after too many deliveries, with the reason in headers; stored in stream `DEADLETTER`. */
  deadLetter: (pipeline: string) => `${ROOT}.deadletter.${pipeline}`,
  allDeadLetters: `${ROOT}.deadletter.>`,
  allControl: `${ROOT}.control.*`,
  /**
   * Where a person steers a task (pause, resume, tell; never cancel or migrate): pipeline first, so a NATS user's
   * permissions can allow it for some pipelines' tasks only, which `control` (task id alone, every action) cannot.
   */
  steer: (pipeline: string, taskId: string) => `${ROOT}.steer.${pipeline}.${taskId}`,
  /** Every task's steering subject in one pipeline. */
  pipelineSteer: (pipeline: string) => `${ROOT}.steer.${pipeline}.*`,
  allSteer: `${ROOT}.steer.*.*`,
  /** A push config's place in the A2A webhook queue (see {@link A2A_PUSH_QUEUE}). */
  a2aPushJob: (taskId: string, configId: string) => `${ROOT}.a2a.push.${taskId}.${configId}`,
  allA2aPushJobs: `${ROOT}.a2a.push.*.*`,
  /** Prefix for request/reply inboxes, kept under `troupe.` so `troupe.>` permissions cover them. */
  inboxPrefix: `${ROOT}._inbox`,
} as const;

/** A subject taken apart. */
export type ParsedSubject =
  | { type: 'task'; pipeline: string }
  | { type: 'agent'; pipeline: string; agent: string }
  | { type: 'session-summary'; pipeline: string; agent: string }
  | { type: 'event'; pipeline: string; taskId: string; kind: string }
  | { type: 'invalid' }
  | { type: 'approval'; pipeline: string; taskId: string; approvalId: string }
  | { type: 'control'; taskId: string }
  | { type: 'steer'; pipeline: string; taskId: string };

/** Parses a Troupe subject; returns undefined for anything that is not one (wrong root, bad token, wrong arity). */
export function parseSubject(subject: string): ParsedSubject | undefined {
  const [root, area, ...rest] = subject.split('.');
  if (root !== ROOT || area === undefined) return undefined;
  const parse = parsers[area];
  return parse ? parse(rest) : undefined;
}

const parsers: Record<string, (tokens: string[]) => ParsedSubject | undefined> = {
  tasks: ([pipeline, ...more]) =>
    pipeline !== undefined && more.length === 0 && isName(pipeline) ? { type: 'task', pipeline } : undefined,
  agents: ([pipeline, agent, ...more]) => {
    if (pipeline === undefined || agent === undefined || !isName(pipeline) || !isName(agent))
      return undefined;
    if (more.length === 0) return { type: 'agent', pipeline, agent };
    return more.length === 1 && more[0] === 'summarize'
      ? { type: 'session-summary', pipeline, agent }
      : undefined;
  },
  events: (tokens) => {
    if (tokens.length === 1 && tokens[0] === '_invalid') return { type: 'invalid' };
    const [pipeline, taskId, ...kind] = tokens;
    if (pipeline === undefined || taskId === undefined || kind.length === 0) return undefined;
    if (!isName(pipeline) || !isTaskId(taskId)) return undefined;
    return { type: 'event', pipeline, taskId, kind: kind.join('.') };
  },
  approvals: ([pipeline, taskId, approvalId, ...more]) =>
    pipeline !== undefined &&
    taskId !== undefined &&
    approvalId !== undefined &&
    more.length === 0 &&
    isName(pipeline) &&
    isTaskId(taskId) &&
    isTaskId(approvalId)
      ? { type: 'approval', pipeline, taskId, approvalId }
      : undefined,
  control: ([taskId, ...more]) =>
    taskId !== undefined && more.length === 0 && isTaskId(taskId) ? { type: 'control', taskId } : undefined,
  steer: ([pipeline, taskId, ...more]) =>
    pipeline !== undefined &&
    taskId !== undefined &&
    more.length === 0 &&
    isName(pipeline) &&
    isTaskId(taskId)
      ? { type: 'steer', pipeline, taskId }
      : undefined,
};
