import { randomBytes } from 'node:crypto';
import {
  CLIENT_WAIT,
  OperationError,
  openBucket,
  PipelineRegistry,
  readValues,
  workflowStoreIfAny,
} from '@troupe/client';
import {
  BUCKETS,
  SessionRecord,
  type SessionSummary,
  type SessionSummaryRequest,
  SessionSummaryWritten,
  type SessionTurn,
  subjects,
  type TaskSubmission,
  type TaskView,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type JetStreamBus, type KvStore, type Logger, SESSION_SUMMARY_TIMEOUT_MS } from '@troupe/runtime';
import type { GatewayActions } from './actions.ts';
import { authorize, mayTouch, type Principal } from './auth.ts';

/** How long a turn may go without a task record before it counts as lost (its submit never reached NATS). */
const LOST_TURN_MS = 60_000;

/**
 * How much of the earlier turns a follow-up carries. The last `wholeTurns` go whole (their goal and result, each
 * result cut at `resultChars`); older ones are folded into the session's summary by the pipeline's summarizer agent
 * (cut at `summaryChars`). When no summarizer answers, the older turns not yet in the summary are condensed to their
 * goal and the start of their result; past `budgetChars` in all, the oldest are left out, and the follow-up says
 * how many.
 */
export const CONTEXT_LIMITS = {
  wholeTurns: 3,
  resultChars: 4_000,
  condensedChars: 300,
  budgetChars: 16_000,
  summaryChars: 16_000,
};

/** One earlier turn as a follow-up (and the summarizer) sees it; its result cut to fit (see {@link CONTEXT_LIMITS}). */
export type EarlierTurn = SessionTurn;

/** What a follow-up task gets as `input.session`. */
export interface SessionContext {
  id: string;
  /** The summary of the session's first `turns` turns; the turns in `earlier` come after them. */
  summary?: { text: string; turns: number };
  earlier: EarlierTurn[];
  /** Older turns left out to stay within the budget. */
  omitted?: number;
}

export class Sessions {
  readonly #bus: JetStreamBus;
  readonly #actions: GatewayActions;
  readonly #logger: Logger;

  constructor(bus: JetStreamBus, actions: GatewayActions, logger: Logger) {
    this.#bus = bus;
    this.#actions = actions;
    this.#logger = logger;
  }

  /** Opens a session on a pipeline the principal may submit to. */
  async open(who: Principal, pipeline: string, id?: string): Promise<SessionRecord> {
    authorize(who, 'submit', pipeline);
    const now = new Date().toISOString();
    const record: SessionRecord = {
      id: id ?? `s-${randomBytes(12).toString('base64url')}`,
      pipeline,
      createdBy: who.name,
      createdAt: now,
      updatedAt: now,
      turns: [],
    };
    const store = await this.#store();
    if ((await store.create(record.id, record)) === undefined) {
      throw new OperationError('conflict', `a session named ${record.id} exists already`);
    }
    return record;
  }

  /** A session with each turn's task as it stands now. */
  async read(
    who: Principal,
    id: string,
  ): Promise<{ session: SessionRecord; tasks: (WorkflowRecord | undefined)[] }> {
    const session = await this.#session(who, 'read', id);
    return { session, tasks: await this.#records(session.turns) };
  }

  /** Sessions the principal may see, newest first. */
  async list(who: Principal, pipeline?: string): Promise<SessionRecord[]> {
    authorize(who, 'read', pipeline);
    return (await readValues(await this.#store()))
      .filter((s) => (!pipeline || s.pipeline === pipeline) && mayTouch(who, s.pipeline))
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.id.localeCompare(b.id));
  }

  /**
   * Runs a follow-up goal as a new task of the session's pipeline that sees the session's earlier goals and results
   * (`input.session`, see {@link SessionContext}), and adds it to the session. Turns that leave the last few are
   * first folded into the session's summary by the pipeline's summarizer agent. Refused (409) while the last turn's
   * task still runs: its result is not known yet.
   */
  async say(
    who: Principal,
    id: string,
    message: Pick<TaskSubmission, 'goal' | 'input' | 'metadata'>,
    waitSeconds?: number,
  ): Promise<{ done: boolean; view: TaskView }> {
    const store = await this.#store();
    for (let attempt = 0; attempt < 5; attempt++) {
      const entry = await store.get(id);
      const session = visible(who, 'submit', id, entry?.value);
      const records = await this.#records(session.turns);
      const earlier = session.turns.map((turn, i) => ({ turn, record: records[i] }));
      const last = earlier.at(-1);
      // A last turn with no record yet is on its way, unless it has been so long that its submit was lost.
      const pending = last && !last.record && Date.now() - Date.parse(last.turn.at) < LOST_TURN_MS;
      if (last?.record?.status === 'running' || pending) {
        throw new OperationError(
          'conflict',
          `the session's last task ${last.turn.taskId} has not ended yet; send the follow-up once it has`,
        );
      }
      // A random part makes the id unguessable: nobody can take it first with a task of their own.
      const taskId = `${id}-${session.turns.length + 1}-${randomBytes(4).toString('base64url').slice(0, 6)}`;
      const turns = earlier.map(({ turn, record }) => ({ taskId: turn.taskId, goal: turn.goal, record }));
      const summary = await this.#summary(session, turns, taskId);
      const context = sessionContext(id, turns, summary);
      const now = new Date().toISOString();
      const next: SessionRecord = {
        ...session,
        ...(summary ? { summary } : {}),
        updatedAt: now,
        turns: [...session.turns, { taskId, goal: message.goal, at: now }],
      };
      // The turn is claimed first: a message sent twice at once makes one task, and the loser tries again.
      const claimed = await store.update(id, next, entry?.revision ?? 0);
      if (claimed === undefined) continue;
      let submitted: Awaited<ReturnType<GatewayActions['submit']>>;
      try {
        submitted = await this.#actions.submit(
          who,
          session.pipeline,
          {
            id: taskId,
            goal: message.goal,
            input: { ...message.input, session: context },
            metadata: { ...message.metadata, session: id },
          },
          waitSeconds === undefined ? {} : { waitSeconds },
        );
      } catch (error) {
        // Not submitted (no coordinator, no such pipeline any more): the turn is given back, so the session is not
        // left waiting on a task that does not exist.
        await store.update(id, session, claimed).catch(() => undefined);
        throw error;
      }
      if (submitted.view.duplicate) {
        throw new OperationError(
          'conflict',
          `task id ${taskId} was taken before this session's turn; send it again`,
        );
      }
      return submitted;
    }
    throw new OperationError('conflict', `session ${id} kept changing; send the message again`);
  }

  /**
   * The session's summary, with the turns that have left the last {@link CONTEXT_LIMITS.wholeTurns} folded in by
   * the pipeline's summarizer agent. When none answers (no worker serves it, its model failed), the summary stays
   * as it was and the follow-up gets those turns condensed instead; the next message tries again.
   */
  async #summary(
    session: SessionRecord,
    turns: readonly Turn[],
    taskId: string,
  ): Promise<SessionSummary | undefined> {
    const older = Math.max(0, turns.length - CONTEXT_LIMITS.wholeTurns);
    const kept = session.summary;
    const covered = kept?.turns ?? 0;
    if (older <= covered) return kept;
    const agent = await this.#summarizer(session.pipeline);
    if (agent === undefined) return kept;
    const request: SessionSummaryRequest = {
      pipeline: session.pipeline,
      agent,
      session: session.id,
      taskId,
      ...(kept ? { previous: kept.text } : {}),
      covered,
      turns: turns.slice(covered, older).map(({ taskId, goal, record }) => ({
        taskId,
        goal,
        status: record?.status ?? 'unknown',
        result: cut(resultOf(record), CONTEXT_LIMITS.resultChars),
      })),
    };
    try {
      const { summary } = await this.#bus.request(
        subjects.sessionSummary(session.pipeline, agent),
        request,
        SessionSummaryWritten,
        { timeoutMs: SESSION_SUMMARY_TIMEOUT_MS + 10_000 },
      );
      return {
        text: cut(summary.summary, CONTEXT_LIMITS.summaryChars),
        turns: older,
        agent,
        provider: summary.provider,
        model: summary.model,
        usage: summary.usage,
        costUsd: summary.costUsd,
        at: new Date().toISOString(),
      };
    } catch (error) {
      this.#logger.warn(
        { err: error, session: session.id, agent },
        `agent ${agent} could not summarize session ${session.id}; its older turns go condensed instead`,
      );
      return kept;
    }
  }

  /** The agent that summarizes the pipeline's sessions, as its coordinator registered it. */
  async #summarizer(pipeline: string): Promise<string | undefined> {
    try {
      return (await (await PipelineRegistry.open(this.#bus, CLIENT_WAIT)).get(pipeline))?.summarizer;
    } catch {
      return undefined;
    }
  }

  /** Each turn's task record as it stands; undefined for one no coordinator has taken up yet. */
  async #records(turns: SessionRecord['turns']): Promise<(WorkflowRecord | undefined)[]> {
    const workflows = await workflowStoreIfAny(this.#bus);
    return Promise.all(turns.map(async (t) => (await workflows?.get(t.taskId))?.value));
  }

  async #session(who: Principal, scope: 'read' | 'submit', id: string): Promise<SessionRecord> {
    return visible(who, scope, id, (await (await this.#store()).get(id))?.value);
  }

  #store(): Promise<KvStore<typeof SessionRecord>> {
    return openBucket(this.#bus, BUCKETS.sessions, SessionRecord);
  }
}

/** The session, when the principal may act on its pipeline; one of a pipeline it may not touch is answered as none. */
function visible(
  who: Principal,
  scope: 'read' | 'submit',
  id: string,
  session: SessionRecord | undefined,
): SessionRecord {
  authorize(who, scope);
  if (!session || !mayTouch(who, session.pipeline))
    throw new OperationError('not_found', `no session named ${id}`);
  authorize(who, scope, session.pipeline);
  return session;
}

/** One turn of a session with its task's record, when there is one. */
interface Turn {
  taskId: string;
  goal: string;
  record: WorkflowRecord | undefined;
}

/**
 * The earlier turns of a session as a follow-up sees them: the summary of the older ones, then the last few whole.
 * Older turns the summary does not cover are condensed, and past the budget the oldest are left out — so a long
 * session stays within what a model can read, as an agent's own conversation does.
 */
export function sessionContext(id: string, all: readonly Turn[], summary?: SessionSummary): SessionContext {
  const { wholeTurns, resultChars, condensedChars, budgetChars } = CONTEXT_LIMITS;
  const covered = Math.min(summary?.turns ?? 0, all.length);
  const turns = all.slice(covered);
  const earlier: EarlierTurn[] = turns.map(({ taskId, goal, record }, i) => {
    const whole = covered + i >= all.length - wholeTurns;
    return {
      taskId,
      goal,
      status: record?.status ?? 'unknown',
      result: cut(resultOf(record), whole ? resultChars : condensedChars),
    };
  });
  let size = 0;
  let kept = earlier.length;
  for (let i = earlier.length - 1; i >= 0; i--) {
    const turn = earlier[i] as EarlierTurn;
    size += turn.goal.length + turn.result.length;
    if (size > budgetChars && i < earlier.length - 1) break;
    kept = i;
  }
  const omitted = kept;
  return {
    id,
    ...(summary && covered > 0 ? { summary: { text: summary.text, turns: covered } } : {}),
    earlier: earlier.slice(kept),
    ...(omitted > 0 ? { omitted } : {}),
  };
}

function resultOf(record: WorkflowRecord | undefined): string {
  const final = record?.final;
  if (final?.kind === 'task.completed') {
    return typeof final.data.output === 'string' ? final.data.output : JSON.stringify(final.data.output);
  }
  if (final?.kind === 'task.failed') return `failed (${final.data.reason}): ${final.data.message}`;
  if (final?.kind === 'task.cancelled') return 'cancelled';
  return '';
}

const cut = (text: string, max: number) =>
  text.length <= max ? text : `${text.slice(0, max)}…[${text.length - max} more characters]`;
