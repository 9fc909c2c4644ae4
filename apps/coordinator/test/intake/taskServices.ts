import { subjects, type TaskSubmission, WorkflowRecord } from '@troupe/protocol';
import { createLogger, EventFactory } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import type { ExhaustedTask } from '../../src/intake/deadLetters.ts';
import { DEFAULT_INTAKE_LIMITS } from '../../src/intake/intakeLimits.ts';
import type { TaskDelivery } from '../../src/intake/taskQueue.ts';
import type { TriagedTask } from '../../src/intake/triage.ts';
import { FinalEvents } from '../../src/task/finalEvents.ts';
import type { TaskServices } from '../../src/task/taskServices.ts';
import { TaskSignals } from '../../src/task/taskSignals.ts';
import { compileFlow } from '../../src/workflow/compileFlow.ts';
import { FlowVersions } from '../../src/workflow/flowVersions.ts';

/** The hash of the pipeline's one version here. */
export const V1 = 'a'.repeat(64);

export const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: { planner: { instructions: 'Plan.' } },
  flow: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
});

/**
 * The services a task's intake stages take, in memory: bus, KV bucket, clock, the pipeline's one version, and a
 * record of what was dead-lettered and whether the runner is stopping (`stop()`).
 */
export function intakeServices(
  options: {
    maxDeliver?: number;
    load?: (hash: string) => Promise<PipelineConfig | undefined>;
    /** The newest version's config (hash {@link V1}); the pipeline's one version by default. */
    config?: PipelineConfig;
    /** The newest version's hash as the registry says it (none: {@link V1}, this coordinator's). */
    newest?: () => Promise<string | undefined>;
  } = {},
) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  const logger = createLogger({ level: 'silent' });
  const events = new EventFactory(clock);
  const deadLetters: { task: ExhaustedTask; reason: { taskId: string; message: string } }[] = [];
  let stopping = false;
  const stop = new AbortController();
  const stopped = stop.signal;
  const closed: string[] = [];
  const services: TaskServices = {
    pipeline: 'unit',
    bus,
    store,
    clock,
    logger,
    events,
    finalEvents: new FinalEvents(events, 'unit'),
    versions: new FlowVersions({
      pipeline: 'unit',
      config: options.config ?? config,
      hash: V1,
      compile: (versionConfig) => compileFlow(versionConfig),
      source: {
        ...(options.load ? { load: options.load } : {}),
        ...(options.newest ? { newest: options.newest } : {}),
      },
      logger,
    }),
    deadLetter: async (_pipeline, task, reason) => {
      deadLetters.push({ task, reason });
    },
    // What the bus published: an ended task's events, as the EVENTS stream would give them back.
    taskEvents: async (taskId) => bus.events.filter((event) => event.taskId === taskId),
    limits: DEFAULT_INTAKE_LIMITS,
    maxDeliver: options.maxDeliver ?? 3,
    keepAliveMs: 1_000,
    signals: new TaskSignals(),
    closeRequests: async (taskId) => {
      closed.push(taskId);
      return 1;
    },
    stopping: () => stopping,
    stopped,
  };
  return {
    services,
    clock,
    bus,
    store,
    deadLetters,
    closed,
    stop: () => {
      stopping = true;
      stop.abort();
    },
  };
}

/** A delivery of a task message, settled nowhere: the stages under test never settle it. */
export function deliveryOf(
  payload: unknown,
  options: { streamSequence?: number; deliveryCount?: number; headers?: Record<string, string> } = {},
): TaskDelivery & { keepAlives: () => number } {
  let keepAlives = 0;
  return {
    subject: subjects.task('unit'),
    data: new TextEncoder().encode(typeof payload === 'string' ? payload : JSON.stringify(payload)),
    headers: options.headers ?? {},
    streamSequence: options.streamSequence ?? 1,
    storedAt: Date.UTC(2026, 0, 1),
    deliveryCount: options.deliveryCount ?? 1,
    ack: () => {},
    term: () => {},
    nak: () => {},
    working: () => {
      keepAlives++;
    },
    park: () => {},
    keepAlives: () => keepAlives,
  };
}

/** A triaged new task, as triage hands it to claim or give-up. */
export function triagedTask(
  submission: TaskSubmission,
  options: { deliveryCount?: number; streamSequence?: number } = {},
): TriagedTask {
  return {
    delivery: deliveryOf(submission, options),
    taskId: submission.id ?? 'task-1',
    submission,
    entry: undefined,
    stalls: (options.deliveryCount ?? 1) - 1,
  };
}
