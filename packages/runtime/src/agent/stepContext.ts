import type { Span } from '@opentelemetry/api';
import type { ModelResponse } from '@troupe/llm';
import type { AgentStepRequest, ToldMessage, TroupeEvent } from '@troupe/protocol';
import type { HumanGate } from '../approvals/humanGate.ts';
import { CheckpointNotStoredError } from '../durable/callerCheckpoint.ts';
import { NewerJournalRecordError } from '../durable/newerJournalRecord.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import type { ValueStore } from '../durable/valueStore.ts';
import type { Clock } from '../events/clock.ts';
import type { EventFactory, EventScope } from '../events/eventFactory.ts';
import type { Logger } from '../logging/index.ts';
import type { KvMemory } from '../memory/memoryStore.ts';
import type { ToolRegistry } from '../tools/toolRegistry.ts';
import type { WorkspaceSync } from '../workspace/workspaceSync.ts';
import type { AgentDefinition } from './agentDefinition.ts';
import { AgentStepError } from './agentStepError.ts';
import type { StepActors } from './stepActors.ts';
import type { StepTold } from './stepTold.ts';

/** What a step needs from the world. */
export interface StepDeps {
  registry: ToolRegistry;
  /** Each task gets `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  clock: Clock;
  events: EventFactory;
  publish(event: TroupeEvent): void;
  /** Task and agent memory for the `remember` and `recall` tools. */
  memory?: KvMemory;
  /**
   * Where model replies, summaries, tool results and approvals are recorded, so a step run again after a crash
   * (here or on another worker) goes on from its records: no model turn asked twice, no tool call run twice.
   */
  journal?: StepJournal;
  /**
   * Where values too large for a message go (a long output, a tool's large result) and where the earlier steps'
   * are read back whole from. Without it, a reply is sent as it is and a large tool result is cut.
   */
  values?: ValueStore;
  /**
   * Hands the task's workspace files between steps and hosts: brings the workspace to the request's manifest before
   * the step, and stores what the step changed after it. Without it, files stay on this host's disk only.
   */
  workspace?: WorkspaceSync;
  /** Where problems that must not fail the step are reported. */
  logger?: Logger;
  /** Where `ask` calls and `ask_human` questions go; without it, they are denied. */
  human?: HumanGate;
  /** Cost in USD of one call; zero when absent. */
  price?: (provider: string, model: string, response: ModelResponse) => number;
  /**
   * The host's actor, under which each step's agent actor runs (one actor system for all the host's
   * steps); without it, a step's agent actor is a root of its own.
   */
  actors?: StepActors;
  /**
   * How long a model call waits before its step is parked (its agent actor stopped, taken up again by a new one when
   * the reply lands, see `AgentRun`); absent or 0, steps are never parked.
   */
  parkAfterMs?: number;
  /** Told when the step starts (true) and stops (false) waiting on its model's reply. */
  modelWait?: (stepId: string, waiting: boolean) => void;
  /**
   * The told messages a recorded run of the step read just before its model call `turn`, where no journal keeps
   * them: `troupe replay` gives its recording's, so they come at the same turns again.
   */
  recordedTold?: (stepId: string, turn: number) => readonly ToldMessage[] | undefined;
}

/** One step of one agent, as the parts that serve its actor see it. */
export interface StepContext {
  agent: AgentDefinition;
  request: AgentStepRequest;
  deps: StepDeps;
  /** Where the step's events go; their `traceparent` is the step's span's when traces are exported. */
  scope: EventScope;
  /** The step's `invoke_agent` span, parent of its model and tool spans. */
  span?: Span;
  /** The messages people told the task, as this run of the step reads them. */
  told: StepTold;
  /** Set once this run asks a person (an approval, a question), for its reply's `askedPeople`; shared by its copies. */
  readonly asked: { people: boolean };
}

export const scopeOf = (request: AgentStepRequest): EventScope => ({
  pipeline: request.pipeline,
  taskId: request.taskId,
  traceparent: request.traceparent ?? '',
});

/**
 * A read or write of the journal that cannot be done (NATS unreachable after retries) costs only a repeated model
 * call if the step runs again; the step goes on, and says so in the log. A record a newer host wrote stops the step
 * all the same (see {@link unreadable}): going on without it would replay the step wrongly; and so does a local step's
 * write refused because its workflow's checkpoint was not stored (see {@link unchecked}): nothing of it may last.
 */
export async function bestEffort<T>(
  step: StepContext,
  what: string,
  op: () => Promise<T> | undefined,
): Promise<T | undefined> {
  try {
    return await op();
  } catch (error) {
    if (NewerJournalRecordError.is(error)) throw unreadable(error);
    if (CheckpointNotStoredError.is(error)) throw unchecked(error);
    step.deps.logger?.warn({ err: error, stepId: step.request.stepId }, `cannot ${what}; the step goes on`);
    return undefined;
  }
}

/**
 * A journal that cannot be reached (after its retries) must not end the task: the step fails with
 * `journal_unavailable`, which the workflow answers by sending the step again later; the run that resumes it
 * finds what was recorded.
 */
export async function unlessUnavailable<T>(op: () => Promise<T> | undefined): Promise<T | undefined> {
  try {
    return await op();
  } catch (error) {
    if (NewerJournalRecordError.is(error)) throw unreadable(error);
    if (CheckpointNotStoredError.is(error)) throw unchecked(error);
    throw new AgentStepError(
      'journal_unavailable',
      `the step journal cannot be reached: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/**
 * A local step whose workflow's checkpoint before it was not stored, as the step's failure: `journal_unavailable`, so
 * a workflow that still runs the task sends the step again once it can store its checkpoint (see `StepJournal.forLocalStep`).
 */
function unchecked(error: CheckpointNotStoredError): AgentStepError {
  return new AgentStepError('journal_unavailable', error.message, { cause: error });
}

/**
 * A journal record of a kind only a newer host knows, as the step's failure: `journal_unavailable`, which every
 * workflow (an older one too) sends again with a backoff, so the step reaches a host that can read it.
 */
function unreadable(error: NewerJournalRecordError): AgentStepError {
  return new AgentStepError('journal_unavailable', error.message, { cause: error });
}
