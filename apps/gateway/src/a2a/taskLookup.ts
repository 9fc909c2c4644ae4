import { Role } from '@a2a-js/sdk';
import { RequestMalformedError, TaskNotFoundError } from '@a2a-js/sdk/errors';
import { isTaskId, type WorkflowRecord } from '@troupe/protocol';
import { authorize } from '../auth.ts';
import type { A2aCaller, A2aServices } from './pipelineAgent.ts';
import { agentMessage, TaskFold, textPart } from './taskMapping.ts';
import { refOf } from './taskReader.ts';

/**
 * Finds the task an A2A request names, as the caller may see it at its endpoint: its record, or — sent a moment ago
 * and not yet taken by a coordinator — its turn in its session.
 */
export class TaskLookup {
  readonly #services: A2aServices;
  readonly #caller: A2aCaller;

  constructor(services: A2aServices, caller: A2aCaller) {
    this.#services = services;
    this.#caller = caller;
  }

  /** The pipeline a request is for: the endpoint's, or the one its `tenant` names at the gateway's endpoint. */
  pipelineOf(tenant: string): string | undefined {
    const fixed = this.#caller.pipeline;
    if (tenant && fixed !== undefined && tenant !== fixed) {
      throw new RequestMalformedError(`tenant: this endpoint serves pipeline ${fixed}, not ${tenant}`);
    }
    const pipeline = fixed ?? (tenant || undefined);
    if (pipeline !== undefined) authorize(this.#caller.who, 'read', pipeline);
    return pipeline;
  }

  /** A task's record, when the caller may read it at this endpoint; TaskNotFound for any other. */
  async record(taskId: string, tenant: string): Promise<WorkflowRecord> {
    if (!taskId) throw new RequestMalformedError('id: a task id is needed');
    // An id no task could have (a KV key would refuse it) names no task.
    if (!isTaskId(taskId))
      throw new TaskNotFoundError(`no task ${JSON.stringify(taskId)} is known: not a task id`);
    const pipeline = this.pipelineOf(tenant);
    const record = await this.#services.actions.readable(this.#caller.who, taskId);
    if (pipeline !== undefined && record.pipeline !== pipeline) {
      throw new TaskNotFoundError(`no task ${taskId} is known on this server`);
    }
    return record;
  }

  /**
   * A task a session's turn has submitted that no coordinator has taken up yet: it has no record, but it exists —
   * SUBMITTED. Undefined for any other id.
   */
  async submittedTurn(taskId: string, tenant: string): Promise<TaskFold | undefined> {
    const sessionId = /^(.+)-\d+-[A-Za-z0-9_-]{6}$/.exec(taskId)?.[1];
    if (!sessionId) return undefined;
    try {
      const { session, tasks } = await this.#services.sessions.read(this.#caller.who, sessionId);
      const pipeline = this.pipelineOf(tenant);
      const at = session.turns.findIndex((t) => t.taskId === taskId);
      const turn = session.turns[at];
      if (!turn || tasks[at] || (pipeline !== undefined && session.pipeline !== pipeline)) return undefined;
      const ref = { taskId, contextId: session.id };
      // The goal is the client's message.
      return new TaskFold(
        ref,
        turn.at,
        agentMessage(ref, `${taskId}.goal`, [textPart(turn.goal)], Role.ROLE_USER),
      );
    } catch {
      return undefined;
    }
  }

  /**
   * A task's record; or, for one sent a moment ago (`returnImmediately`) that no coordinator has taken yet, its
   * SUBMITTED form and its pipeline, so a client may subscribe to it right after sending.
   */
  async recordOrTurn(
    taskId: string,
    tenant: string,
  ): Promise<{ record: WorkflowRecord } | { fold: TaskFold; pipeline: string }> {
    try {
      return { record: await this.record(taskId, tenant) };
    } catch {
      const waiting = await this.submittedTurn(taskId, tenant);
      // Not waiting any more: a coordinator may have taken it between the two looks.
      if (!waiting) return { record: await this.record(taskId, tenant) };
      const { session } = await this.#services.sessions.read(this.#caller.who, waiting.ref.contextId);
      return { fold: waiting, pipeline: session.pipeline };
    }
  }

  /**
   * The task a push config is for: from its record, or — submitted a moment ago (`returnImmediately`) and not yet
   * taken by a coordinator — from its turn in its session, so a client may give its webhook right after sending.
   */
  async pushTarget(
    taskId: string,
    tenant: string,
  ): Promise<{ taskId: string; pipeline: string; contextId: string }> {
    const recorded = async () => {
      const record = await this.record(taskId, tenant);
      return { taskId: record.taskId, pipeline: record.pipeline, contextId: refOf(record).contextId };
    };
    try {
      return await recorded();
    } catch {
      const waiting = await this.submittedTurn(taskId, tenant);
      // Not waiting any more: a coordinator may have taken it between the two looks.
      if (!waiting) return recorded();
      const { session } = await this.#services.sessions.read(this.#caller.who, waiting.ref.contextId);
      return { taskId, pipeline: session.pipeline, contextId: session.id };
    }
  }
}
