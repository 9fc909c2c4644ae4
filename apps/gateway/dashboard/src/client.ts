/** The gateway's HTTP API, as the dashboard calls it: JSON in and out, the token from the page. */

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** Input tokens read from the prompt cache. */
  cachedTokens: number;
  /** Input tokens written to the prompt cache; absent when none were. */
  cacheWriteTokens?: number;
  costUsd: number;
  modelCalls: number;
}

export interface TaskView {
  taskId: string;
  pipeline: string;
  goal: string;
  /** The task's labels; `session` names the session it is a turn of. */
  metadata?: Record<string, string>;
  status: 'submitted' | 'running' | 'completed' | 'failed' | 'cancelled';
  state?: string;
  /** The hash of the pipeline version the task runs on. */
  version?: string;
  round?: number;
  usage?: Usage;
  createdAt?: string;
  updatedAt?: string;
  activity?: { kind: string; step: string; agent: string; since: string };
  output?: unknown;
  failure?: { reason: string; message: string };
  /** Set while a person holds the task (`status` stays `running`): since when, by whom, why. */
  paused?: { since: string; by?: string; reason?: string };
  /** The task this one was restarted or forked from, and at which step. */
  origin?: TaskOrigin;
}

/** Where a restarted or forked task came from (`POST /v1/tasks/{id}/restart`, `…/fork`). */
export interface TaskOrigin {
  taskId: string;
  kind: 'restart' | 'fork';
  step: string;
  /** What a fork changed: `input`, `steps.<id>.output`. */
  edited?: string[];
  by?: string;
}

export interface Pipeline {
  name: string;
  description?: string;
  agents: string[];
  steps: string[];
  graph?: {
    nodes: { id: string; kind: string; agent: string; parent?: string; branch?: string; when?: string }[];
    edges: { from: string; to: string; when?: string }[];
  };
}

export interface HumanRequest {
  id: string;
  kind: 'approval' | 'question';
  status: string;
  taskId: string;
  pipeline: string;
  agent: string;
  tool?: string;
  arguments?: string;
  prompt: string;
  requestedAt: string;
  /** When it runs out; while `held`, not at all (its asker sets a new one at the resume). */
  expiresAt: string;
  /** Its task is paused since `since`: it does not run out, and has `leftMs` from the resume. */
  held?: { since: string; leftMs: number };
}

/** The token the page signed in with, as `GET /v1/token` says: what it may do. */
export interface TokenInfo {
  name: string;
  scopes: ('read' | 'submit' | 'approve' | 'admin')[];
  /** The pipelines it may touch; every one when absent. */
  pipelines?: string[];
}

/** A session as `GET /v1/sessions` lists it. */
export interface SessionHead {
  id: string;
  pipeline: string;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
}

/** A session with each message's task as it stands, as `GET /v1/sessions/{id}` gives it. */
export interface Session extends SessionHead {
  turns: {
    taskId: string;
    goal: string;
    at: string;
    status: TaskView['status'];
    output?: unknown;
    failure?: { reason: string; message: string };
  }[];
  summary?: { text: string; turns: number };
}

/** One Troupe event, as the gateway streams it. */
export interface TroupeEvent {
  id: string;
  ts: string;
  pipeline: string;
  taskId: string;
  kind: string;
  from?: string;
  to?: string;
  data: Record<string, unknown>;
}

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const TOKEN_KEY = 'troupe.token';

export class Api {
  token: string | null = localStorage.getItem(TOKEN_KEY);

  setToken(token: string | null): void {
    this.token = token;
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  }

  get<T>(path: string): Promise<T> {
    return this.#call<T>('GET', path);
  }

  /** A POST; `headers` adds to the token's (an `Idempotency-Key`). */
  post<T>(path: string, body: unknown, headers: Record<string, string> = {}): Promise<T> {
    return this.#call<T>('POST', path, body, headers);
  }

  /** A response as it comes (a file's bytes and type), with the token; a refusal is an {@link ApiError}. */
  async raw(path: string): Promise<Response> {
    const response = await fetch(path, { headers: this.#headers() });
    if (!response.ok) throw await errorOf(response);
    return response;
  }

  /** Server-Sent Events of a path; EventSource cannot send headers, so the token goes as `access_token`. */
  events(path: string, onEvent: (event: TroupeEvent) => void, onState: (open: boolean) => void): EventSource {
    const url = new URL(path, location.href);
    if (this.token) url.searchParams.set('access_token', this.token);
    const source = new EventSource(url);
    const handle = (message: MessageEvent<string>) => onEvent(JSON.parse(message.data) as TroupeEvent);
    // Each event is sent under its kind's name; `message` is what EventSource calls unnamed ones.
    for (const kind of EVENT_KINDS) source.addEventListener(kind, handle as EventListener);
    source.onopen = () => onState(true);
    source.onerror = () => onState(false);
    return source;
  }

  async #call<T>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<T> {
    const response = await fetch(path, {
      method,
      headers: {
        ...headers,
        ...this.#headers(),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw await errorOf(response);
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  #headers(): Record<string, string> {
    return this.token ? { authorization: `Bearer ${this.token}` } : {};
  }
}

/** The gateway's `{"error": {code, message}}`, or the status when the body is not that (a proxy's page). */
async function errorOf(response: Response): Promise<ApiError> {
  const text = await response.text();
  let error: { code?: unknown; message?: unknown } | undefined;
  try {
    error = (JSON.parse(text) as { error?: typeof error }).error;
  } catch {
    error = undefined;
  }
  return typeof error?.message === 'string'
    ? new ApiError(response.status, String(error.code ?? 'http_error'), error.message)
    : new ApiError(response.status, 'http_error', `HTTP ${response.status} ${response.statusText}`.trim());
}

export const EVENT_KINDS = [
  'task.accepted',
  'task.resumed',
  'task.paused',
  'task.told',
  'agent.told',
  'step.started',
  'step.skipped',
  'route.chosen',
  'branches.joined',
  'items.joined',
  'agent.handoff',
  'llm.request',
  'llm.response',
  'llm.error',
  'llm.delta',
  'llm.retry',
  'llm.fallback',
  'context.compacted',
  'session.compacted',
  'tool.call',
  'tool.progress',
  'tool.result',
  'approval.requested',
  'approval.decided',
  'human.asked',
  'human.answered',
  'step.completed',
  'task.completed',
  'task.failed',
  'task.cancelled',
  'eval.scored',
] as const;
