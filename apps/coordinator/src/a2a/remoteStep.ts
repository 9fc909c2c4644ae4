import { createHash } from 'node:crypto';
import { type Message, type Task, TaskState } from '@a2a-js/sdk';
import type { Client } from '@a2a-js/sdk/client';
import {
  type AgentStepReply,
  type AgentStepRequest,
  emptyUsage,
  errorMessage,
  isStepErrorCode,
  Verdict,
} from '@troupe/protocol';
import {
  type AgentStep,
  endSpan,
  failedReply,
  offloadReply,
  parseVerdict,
  preview,
  type RemoteCallRecord,
  type StepDeps,
  StepJournal,
  type StepStop,
  StepTimedOutError,
  startClientSpan,
  TaskEndedError,
  ToolError,
  type TraceSpan,
  traceparentOf,
  unreadContextReply,
  withWholeContext,
} from '@troupe/runtime';
import type { RemoteAgentSettings } from '../config/remoteAgents.ts';
import { A2aCallError } from './a2aCallError.ts';
import { type A2aCallOptions, connectA2a, retrying } from './a2aConnection.ts';
import {
  answerMessage,
  holdsMessage,
  messageOutput,
  readParts,
  stepMessage,
  taskOutput,
} from './a2aParts.ts';
import { claim, journaled, save } from './remoteCallJournal.ts';
import { changed, getTask, TERMINAL } from './remoteTaskWatch.ts';

/** Stops after which nothing needs the remote task any more: it is cancelled. Any other stop leaves it running. */
const GIVES_UP: readonly StepStop['why'][] = ['task_ended', 'step_timeout', 'deadline', 'aborted'];

/** The tool name the remote call has in events and traces. */
export const A2A_CALL_TOOL = 'a2a';

export interface RemoteRun {
  settings: RemoteAgentSettings;
  request: AgentStepRequest;
  deps: StepDeps;
  call: A2aCallOptions;
  span: TraceSpan;
  /** The journal record of the call, as far as it has got. */
  record?: RemoteCallRecord | Omit<RemoteCallRecord, 'kind' | 'recordedAt'> | undefined;
  /** The journal revision of the record as this run read or first wrote it, until the remote task's id is written. */
  revision?: number | undefined;
  started: number;
}

/**
 * One step of a remote A2A agent. The call is durable: the message's ids are journaled before it goes, and the
 * remote task's id as soon as it is known, so a run of the step that follows a crash reads the task (GetTask) rather
 * than sending again; one that finds only the ids looks for the task by its context and message (ListTasks) first.
 * The agent asking for input becomes a question to a person, whose answer is the task's next message. A stop that
 * gives the step up (the task ended, the step's time ran out) cancels the remote task; a stop that hands the step to
 * another run (this host stopping) leaves it running for that run. Never rejects.
 */
export function startRemoteStep(
  settings: RemoteAgentSettings,
  request: AgentStepRequest,
  deps: StepDeps,
  options: { fetch?: typeof fetch } = {},
): AgentStep {
  const controller = new AbortController();
  let stopped: StepStop | undefined;
  const stop = (why: StepStop) => {
    if (stopped) return;
    stopped = why;
    controller.abort(abortReason(why, request));
  };
  const span = startClientSpan(request.traceparent, `invoke_agent ${settings.name}`, {
    'gen_ai.operation.name': 'invoke_agent',
    'gen_ai.provider.name': 'a2a',
    'gen_ai.agent.name': settings.name,
    'gen_ai.conversation.id': request.taskId,
    'a2a.agent.url': settings.card,
    'troupe.task.id': request.taskId,
    'troupe.pipeline': request.pipeline,
    'troupe.step': request.step,
    'troupe.step.id': request.stepId,
    'troupe.round': request.round,
  });
  const run: RemoteRun = {
    settings,
    request,
    deps,
    span,
    started: deps.clock.now(),
    call: {
      settings,
      clock: deps.clock,
      traceparent: traceparentOf(span, request.traceparent ?? ''),
      signal: controller.signal,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    },
  };
  const limit = timeLimit(request, deps);
  const timer = limit === undefined ? undefined : deps.clock.setTimeout(() => stop(limit.stop), limit.ms);
  const reply = callRemote(run)
    .catch(async (error: unknown) => {
      if (stopped) return stoppedReply(run, stopped);
      const reply = failureReply(run, error);
      // A step that failed for good needs the remote task no more.
      if (!reply.ok && reply.error.code !== 'journal_unavailable')
        await cancelRemote(run, reply.error.message);
      return reply;
    })
    .then((result) => offloadReply(run, result))
    .then((result) => finish(run, result))
    .finally(() => deps.clock.clearTimeout(timer));
  return { reply, stop };
}

/** The stop the step's own limits make: the request's timeout, or the task's deadline, whichever comes first. */
function timeLimit(request: AgentStepRequest, deps: StepDeps): { ms: number; stop: StepStop } | undefined {
  const deadline = request.budget?.deadline;
  const toDeadline = deadline === undefined ? undefined : Math.max(0, deadline - deps.clock.now());
  const timeout = request.timeoutMs;
  if (toDeadline !== undefined && (timeout === undefined || toDeadline < timeout))
    return { ms: toDeadline, stop: { why: 'deadline' } };
  return timeout === undefined ? undefined : { ms: timeout, stop: { why: 'step_timeout' } };
}

async function callRemote(run: RemoteRun): Promise<AgentStepReply> {
  const { settings, request, deps } = run;
  const key = StepJournal.remoteKey(request.stepId);
  const read = async () => {
    const at = await journaled(() => deps.journal?.remoteCallAt(key));
    run.revision = at?.revision;
    return at?.record;
  };
  // No run of a fresh step can have recorded anything.
  let found = request.fresh ? undefined : await read();
  const first = {
    endpoint: settings.card,
    messageId: `troupe-${request.stepId}`,
    contextId: contextIdOf(request),
    answers: 0,
  };
  // Recorded only if no other run of the step has: one that has may have sent the message and named its task.
  if (!found && !(await claim(run, first))) {
    found = await read();
    // What is there is no call's record (it cannot be read): this run's replaces it.
    if (!found) await save(run, first);
  }
  run.record = found ?? first;
  publishCall(run);
  const client = await retrying(run.call, 'read its agent card', () => connectA2a(run.call));
  // A card that says there is an extended one is read again (GetExtendedAgentCard), a request like any other.
  const card = await retrying(run.call, 'read its extended agent card', () =>
    client.getAgentCard({ signal: run.call.signal }),
  );
  const streams = card.capabilities?.streaming === true;
  const record = run.record;
  let result: Task | Message;
  if (record.taskId !== undefined) {
    result = await getTask(run, client, record.taskId);
  } else {
    const whole = await withWholeContext(run).catch((error: unknown) => unreadContextReply(request, error));
    if ('ok' in whole) return whole;
    const message = stepMessage(whole, record);
    // Found with no task id: this step's message may have gone before a crash; look before sending it again.
    result =
      (found ? await findSent(run, client) : undefined) ??
      (await retrying(
        run.call,
        'send the step',
        () => send(client, message, run),
        () => findSent(run, client),
      ));
  }
  if (!('status' in result)) return okReply(run, messageOutput(result));
  let task: Task = record.taskId === undefined ? await recordTask(run, client, result) : result;
  run.span.setAttribute('a2a.task.id', task.id);
  run.span.setAttribute('a2a.context.id', task.contextId);
  for (;;) {
    const state = task.status?.state ?? TaskState.TASK_STATE_UNSPECIFIED;
    if (TERMINAL.includes(state)) return endedReply(run, task);
    if (state === TaskState.TASK_STATE_INPUT_REQUIRED) task = await answer(run, client, task, streams);
    else if (state === TaskState.TASK_STATE_AUTH_REQUIRED)
      throw new A2aCallError(
        'auth',
        `remote agent ${settings.name} (${settings.card}) asks for authentication in task ${task.id}, which Troupe cannot give mid-task; give the token in a2a.auth`,
      );
    else task = await changed(run, client, task, streams);
  }
}

/** Sends a message and returns the task it made (or the agent's direct reply), without waiting for it to end. */
function send(client: Client, message: Message, run: RemoteRun): Promise<Task | Message> {
  return client.sendMessage(
    {
      tenant: '',
      message,
      configuration: {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: true,
      },
      metadata: undefined,
    },
    { signal: run.call.signal },
  );
}

/**
 * The task this step's first message made, if it reached the agent: among the tasks of the step's context, the one
 * whose history holds the message's id.
 */
async function findSent(run: RemoteRun, client: Client): Promise<Task | undefined> {
  const record = run.record;
  if (!record) return undefined;
  const page = await retrying(run.call, `list the tasks of context ${record.contextId}`, () =>
    client.listTasks(
      {
        tenant: '',
        contextId: record.contextId,
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 100,
        pageToken: '',
        statusTimestampAfter: undefined,
        includeArtifacts: true,
      },
      { signal: run.call.signal },
    ),
  );
  return page.tasks.find((task) => holdsMessage(task, record.messageId));
}

/** What tells one question of the remote agent from another: its status's time, message id and text. */
function questionKey(task: Task): string {
  const status = task.status;
  return [
    status?.timestamp ?? '',
    status?.message?.messageId ?? '',
    readParts(status?.message?.parts ?? []).text,
  ].join('|');
}

/**
 * The agent asks for input: a person is asked (the request journaled, so a run after a crash waits on the same one),
 * and the answer goes to the task as its next message. Which question is being answered is journaled before the
 * answer goes: a run that finds the answer in the task's history counts it sent, and one that finds the task still
 * showing the question it answered waits for the agent to move on rather than asking again.
 */
async function answer(run: RemoteRun, client: Client, task: Task, streams: boolean): Promise<Task> {
  const { settings, request, deps } = run;
  let record = { ...(run.record as RemoteCallRecord), taskId: task.id };
  const question = questionKey(task);
  if (question === record.answered) return changed(run, client, task, streams);
  if (record.asking !== undefined && record.asking !== question) {
    // A run that died had sent the answer to another question, and the agent moved on from it: it went (an agent
    // may keep it under an id of its own). Counted, so this question is asked anew, not given that answer.
    const { asking, ...rest } = record;
    record = { ...rest, answers: record.answers + 1, answered: asking };
    await save(run, record);
  }
  const n = record.answers + 1;
  const messageId = `${record.messageId}-answer-${n}`;
  if (holdsMessage(task, messageId)) {
    // Sent by a run that died before recording it.
    const { asking, ...rest } = record;
    await save(run, { ...rest, answers: n, answered: asking ?? question });
    return getTask(run, client, task.id);
  }
  if (!deps.human)
    throw new A2aCallError(
      'failed',
      `remote agent ${settings.name} asks for input in task ${task.id}, and there is nobody to ask here`,
    );
  const asked = readParts(task.status?.message?.parts ?? []);
  const prompt = [asked.text, asked.data === undefined ? '' : JSON.stringify(asked.data)]
    .filter(Boolean)
    .join('\n\n');
  const questionKeyOf = StepJournal.humanKey(`${StepJournal.remoteKey(request.stepId)}.${n}`, 'question');
  const earlier = await journaled(() => deps.journal?.humanRequest(questionKeyOf));
  let text: string;
  try {
    text = await deps.human.ask(
      `${settings.name} asks: ${prompt || '(the remote agent asks for input and says no more)'}`,
      {
        pipeline: request.pipeline,
        taskId: request.taskId,
        traceparent: run.call.traceparent,
        agent: request.agent,
        stepId: request.stepId,
        timeoutMs: settings.answerTimeoutMs,
      },
      run.call.signal,
      {
        ...(earlier === undefined ? {} : { id: earlier }),
        onAsked: (id) =>
          journaled(() =>
            deps.journal?.recordHumanRequest(questionKeyOf, id, new Date(deps.clock.now())),
          ).then(() => undefined),
      },
    );
  } catch (error) {
    if (error instanceof ToolError && error.code === 'timeout')
      throw new A2aCallError(
        'approval_timeout',
        `remote agent ${settings.name} asked for input: ${error.message}`,
      );
    throw error;
  }
  await save(run, { ...record, asking: question });
  const message = answerMessage(text, { messageId, contextId: record.contextId, taskId: task.id });
  await retrying(
    run.call,
    `send the answer to task ${task.id}`,
    () => send(client, message, run),
    async () => {
      const now = await getTask(run, client, task.id);
      return holdsMessage(now, messageId) ? now : undefined;
    },
  );
  const { asking: _sent, ...rest } = record;
  await save(run, { ...rest, answers: n, answered: question });
  return getTask(run, client, task.id);
}

/** The reply for a task that ended: its artifacts when it completed, else why not, naming the agent. */
function endedReply(run: RemoteRun, task: Task): AgentStepReply {
  const { settings, request } = run;
  const state = task.status?.state;
  run.span.setAttribute('a2a.task.state', TaskState[state ?? 0] ?? String(state));
  if (state === TaskState.TASK_STATE_COMPLETED) return okReply(run, taskOutput(task));
  const said = readParts(task.status?.message?.parts ?? []).text;
  const how =
    state === TaskState.TASK_STATE_FAILED
      ? 'failed'
      : state === TaskState.TASK_STATE_REJECTED
        ? 'rejected the step'
        : 'cancelled it';
  return failedReply(
    request.stepId,
    'failed',
    `remote agent ${settings.name} (${settings.card}) ${how} (task ${task.id})${said ? `: ${said}` : ''}`,
  );
}

function okReply(run: RemoteRun, out: { output: string; structured?: unknown }): AgentStepReply {
  const { settings, request } = run;
  const turns = 1 + (run.record?.answers ?? 0);
  const usage = { ...emptyUsage() };
  if (request.expect === 'verdict') {
    const fromData = Verdict.safeParse(out.structured);
    const verdict = fromData.success ? fromData.data : parseVerdict(out.output);
    if (!verdict)
      return {
        ...failedReply(
          request.stepId,
          'invalid_output',
          `remote agent ${settings.name} reviews, but its answer holds no verdict ({"decision": "approve" | "reject", "feedback": "…"} as a data part or JSON text): ${preview(out.output)}`,
        ),
        turns,
      };
    return { ok: true, stepId: request.stepId, output: out.output, verdict, usage, turns };
  }
  return {
    ok: true,
    stepId: request.stepId,
    output: out.output,
    ...(out.structured === undefined ? {} : { structured: out.structured }),
    usage,
    turns,
  };
}

/** The reply of a run that was stopped: the remote task is cancelled when the step is given up. */
async function stoppedReply(run: RemoteRun, stop: StepStop): Promise<AgentStepReply> {
  const { request, settings } = run;
  if (GIVES_UP.includes(stop.why)) await cancelRemote(run, `the step was stopped (${stop.why})`);
  const waiting = run.deps.human?.waitingOn?.(request.stepId);
  switch (stop.why) {
    case 'step_timeout':
      return failedReply(
        request.stepId,
        waiting ? 'approval_timeout' : 'step_timeout',
        `remote agent ${settings.name} did not finish step ${request.stepId} within ${Math.round((request.timeoutMs ?? 0) / 1000)} s${waiting ? ' (it waited for a person to answer)' : ''}`,
      );
    case 'deadline':
      return failedReply(
        request.stepId,
        'budget_exceeded',
        `the task's time ran out while remote agent ${settings.name} worked`,
      );
    case 'worker_stopping':
      return failedReply(
        request.stepId,
        'worker_stopped',
        `the host calling remote agent ${settings.name} is stopping`,
      );
    default:
      return failedReply(request.stepId, 'aborted', `step ${request.stepId} was stopped (${stop.why})`);
  }
}

/** Cancels the remote task, once, quickly: a failure to is logged, never the step's outcome. */
async function cancelRemote(run: RemoteRun, why: string, taskId = run.record?.taskId): Promise<void> {
  if (taskId === undefined) return;
  const signal = AbortSignal.timeout(run.settings.requestTimeoutMs);
  const call = {
    ...run.call,
    signal,
    settings: { ...run.settings, maxAttempts: Math.min(2, run.settings.maxAttempts) },
  };
  try {
    const client = await connectA2a(call);
    await client.cancelTask({ tenant: '', id: taskId, metadata: { reason: why } }, { signal });
    run.span.setAttribute('a2a.task.state', 'TASK_STATE_CANCELED');
  } catch (error) {
    run.deps.logger?.warn(
      { err: error, stepId: run.request.stepId, agent: run.settings.name, a2aTaskId: taskId },
      `cannot cancel task ${taskId} of remote agent ${run.settings.name} (${run.settings.card}): ${errorMessage(error)}`,
    );
  }
}

function failureReply(run: RemoteRun, error: unknown): AgentStepReply {
  const code =
    A2aCallError.is(error) || isStepErrorCode((error as { code?: unknown })?.code)
      ? (error as A2aCallError).code
      : 'failed';
  const message = errorMessage(error);
  const named = message.includes(run.settings.name)
    ? message
    : `remote agent ${run.settings.name} (${run.settings.card}): ${message}`;
  return { ...failedReply(run.request.stepId, code, named), turns: 1 + (run.record?.answers ?? 0) };
}

/** Ends the span and says in the events how the call ended, as a tool call's result. */
function finish(run: RemoteRun, reply: AgentStepReply): AgentStepReply {
  const { deps, request, settings } = run;
  try {
    endSpan(run.span, reply.ok ? undefined : { type: reply.error.code, message: reply.error.message });
  } catch (error) {
    deps.logger?.warn({ err: error, stepId: request.stepId }, 'cannot end the step span');
  }
  publish(run, () =>
    deps.events.make(
      'tool.result',
      scopeOf(run),
      {
        agent: request.agent,
        stepId: request.stepId,
        turn: 1,
        index: 0,
        callId: callIdOf(request),
        tool: A2A_CALL_TOOL,
        ok: reply.ok,
        decision: 'allow',
        output: preview(reply.ok ? reply.output : ''),
        ...(reply.ok ? {} : { error: reply.error }),
        durationMs: Math.max(0, deps.clock.now() - run.started),
      },
      { from: `a2a:${settings.name}`, to: request.agent },
    ),
  );
  return reply;
}

/** Says in the events that the step calls the remote agent, with where and the message's ids. */
function publishCall(run: RemoteRun): void {
  const { deps, request, settings, record } = run;
  publish(run, () =>
    deps.events.make(
      'tool.call',
      scopeOf(run),
      {
        agent: request.agent,
        stepId: request.stepId,
        turn: 1,
        index: 0,
        callId: callIdOf(request),
        tool: A2A_CALL_TOOL,
        arguments: JSON.stringify({
          card: settings.card,
          messageId: record?.messageId,
          contextId: record?.contextId,
        }),
      },
      { from: request.agent, to: `a2a:${settings.name}` },
    ),
  );
}

function publish(run: RemoteRun, make: () => Parameters<StepDeps['publish']>[0]): void {
  // An event that cannot be made or sent must not cost the step.
  try {
    run.deps.publish(make());
  } catch (error) {
    run.deps.logger?.warn(
      { err: error, stepId: run.request.stepId },
      'cannot publish an event of a remote call',
    );
  }
}

const callIdOf = (request: AgentStepRequest) => `${request.stepId}.a2a`;

/**
 * The A2A context of a Troupe task's calls: one per task, so a remote agent sees its rounds (a rework after a review)
 * as one conversation; made from the pipeline and task, short and plain enough for any server's context ids.
 */
export const contextIdOf = (request: Pick<AgentStepRequest, 'pipeline' | 'taskId'>): string =>
  `troupe-${createHash('sha256').update(`${request.pipeline}/${request.taskId}`).digest('hex').slice(0, 32)}`;
const scopeOf = (run: RemoteRun) => ({
  pipeline: run.request.pipeline,
  taskId: run.request.taskId,
  traceparent: run.call.traceparent,
});

/**
 * Journals the id of the task this run's message made, unless another run of the step (live at the same time, both
 * in the window before an id was journaled) journaled its own first: then that task is the step's, followed from here
 * on, and this run's is cancelled, so the remote agent does the work once.
 */
async function recordTask(run: RemoteRun, client: Client, task: Task): Promise<Task> {
  const { deps, request } = run;
  const record = { ...(run.record as RemoteCallRecord), taskId: task.id };
  const revision = run.revision;
  if (!deps.journal || revision === undefined) {
    await save(run, record);
    return task;
  }
  const journal = deps.journal;
  const key = StepJournal.remoteKey(request.stepId);
  const now = new Date(deps.clock.now());
  run.revision = undefined;
  if ((await journaled(() => journal.updateRemoteCall(key, record, revision, now))) !== undefined) {
    run.record = record;
    return task;
  }
  const written = await journaled(() => journal.remoteCall(key));
  const other = written?.taskId;
  // Another run wrote, but named no other task (or this one): this run's task stands.
  if (written === undefined || other === undefined || other === task.id) {
    await save(run, record);
    return task;
  }
  await cancelRemote(
    run,
    `another run of step ${request.stepId} sent the message too, and its task ${other} is followed`,
    task.id,
  );
  run.record = written;
  return getTask(run, client, other);
}

/** Why the run was stopped, in the form a person's open request reads it (see the agent step's own). */
function abortReason(stop: StepStop, request: AgentStepRequest): Error {
  if (stop.why === 'task_ended') return new TaskEndedError(stop.taskId, stop.ending);
  if (stop.why === 'step_timeout') return new StepTimedOutError(request.stepId);
  return new Error(`step ${request.stepId} was stopped (${stop.why})`);
}
