import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CaseRecording, EvalCase, EvalMode, TroupeEvent } from '@troupe/protocol';
import { EventFactory, type Logger, newTraceparent, systemClock } from '@troupe/runtime';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { runTask } from '../inProcessRun.ts';
import { realTools } from '../replay/realTools.ts';
import { type JournalReader, Recording, type ValueReader } from '../replay/recording.ts';
import { recordedTask, recordedTools, runOffline } from '../replay/replayTask.ts';
import { caseRunOf } from './caseRun.ts';
import { EvalsError } from './evalsError.ts';
import type { CaseRun } from './evalTypes.ts';
import { modelModePeople } from './modelModePeople.ts';
import { modelModeTools } from './modelModeTools.ts';

export interface RunCaseOptions {
  mode: EvalMode;
  pipeline: LoadedPipeline;
  /** Cancels the case's run: its task ends `task.cancelled`. */
  signal?: AbortSignal;
  /** `model` mode: the environment the pipeline's MCP servers are started with; `process.env` when absent. */
  env?: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
  /** `live` mode: what an `ask` permission rule gets with nobody to ask (`deny`, the default, or `allow`). */
  approvals?: 'allow' | 'deny';
  /** `model` mode: tools to run for real where the recording has no matching call, although they may have effects. */
  runTools?: readonly string[];
}

/**
 * Runs one case of a dataset against a pipeline, in this process, and returns what scorers read of it:
 * - `replay`: the case's recorded run again, its models and tools answered from the recording (nothing is called);
 * - `model`: the pipeline's models are called; tools answer from the recording where the call matches, and run for
 *   real only where that cannot touch the world or `runTools` names them (see {@link modelModeTools}); people and
 *   memory answer from it or refuse;
 * - `live`: a real task (`runTask`), with real models and tools in a workspace under the OS temp dir removed after.
 *
 * Throws an `EvalsError` when the case cannot run so: `not_replayable` (a replay of a case with no recording, or a
 * replay or model run of one recorded on another pipeline), `incomplete_recording` (its recording lacks its `task.accepted` or a value it refers to).
 */
export async function runCase(evalCase: EvalCase, options: RunCaseOptions): Promise<CaseRun> {
  switch (options.mode) {
    case 'replay':
      return replayCase(evalCase, options);
    case 'model':
      return modelCase(evalCase, options);
    case 'live':
      return liveCase(evalCase, options);
  }
}

async function replayCase(evalCase: EvalCase, options: RunCaseOptions): Promise<CaseRun> {
  const recorded = evalCase.recording;
  if (!recorded)
    throw new EvalsError(
      'not_replayable',
      `case ${evalCase.id} has no recording; run it with --mode model or live`,
    );
  const { config } = options.pipeline;
  if (recorded.pipeline !== config.name)
    throw new EvalsError(
      'not_replayable',
      `case ${evalCase.id} was recorded on pipeline ${recorded.pipeline}, not ${config.name}; run it on a pipeline named ${recorded.pipeline}, or with --mode live (model mode answers its tools from that recording too)`,
    );
  const recording = await recordingOf(recorded);
  const accepted = recording.accepted;
  if (!accepted)
    throw new EvalsError(
      'incomplete_recording',
      `the recording of case ${evalCase.id} has no task.accepted event to start from`,
    );
  const run = await runOffline({
    pipeline: options.pipeline,
    recording,
    task: recordedTask(recording),
    models: 'recorded',
    registry: recordedTools(recording, config, undefined, valuesOf(recorded)),
    human: recording.people(),
    // Priced as the recorded replies cost, so usage scores as the recorded run's did; nothing is spent.
    priced: true,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
  return caseRunOf(evalCase, [accepted, ...run.events], { output: run.output });
}

async function modelCase(evalCase: EvalCase, options: RunCaseOptions): Promise<CaseRun> {
  const { config } = options.pipeline;
  // Its tools answer from the recording: another pipeline's run would answer this one's calls, as a replay refuses.
  if (evalCase.recording && evalCase.recording.pipeline !== config.name)
    throw new EvalsError(
      'not_replayable',
      `case ${evalCase.id} was recorded on pipeline ${evalCase.recording.pipeline}, not ${config.name}, and model mode answers its tools from that recording; run it with --mode live, or on a pipeline named ${evalCase.recording.pipeline}`,
    );
  // A task of its own: the pipeline's models see a new task (a scripted model plays its script from the start).
  const taskId = `e-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const recording = evalCase.recording ? await recordingOf(evalCase.recording) : new Recording(taskId, []);
  const names = Object.values(config.agents).flatMap((agent) => agent.tools ?? []);
  // Memory is shared with other tasks: its tools answer from the record or fail, and write nothing.
  const { registry: real, close } = await realTools(options.pipeline, {
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.env ? { env: options.env } : {}),
  });
  try {
    const values = evalCase.recording ? valuesOf(evalCase.recording) : undefined;
    const registry = modelModeTools({
      names,
      real,
      ...(options.runTools ? { runTools: options.runTools } : {}),
      calls: recording.calls(),
      ...(values ? { values } : {}),
    });
    const task = {
      taskId,
      pipeline: config.name,
      goal: evalCase.goal,
      ...(evalCase.input ? { input: evalCase.input } : {}),
      ...(evalCase.metadata ? { metadata: evalCase.metadata } : {}),
      traceparent: newTraceparent(),
    };
    const accepted = new EventFactory(systemClock).make(
      'task.accepted',
      { pipeline: config.name, taskId, traceparent: task.traceparent },
      {
        goal: task.goal,
        ...(task.input ? { input: task.input } : {}),
        ...(task.metadata ? { metadata: task.metadata } : {}),
      },
      { from: 'eval', to: config.name },
    );
    const run = await runOffline({
      pipeline: options.pipeline,
      recording,
      task,
      models: 'pipeline',
      registry,
      human: modelModePeople(recording.events),
      priced: true,
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    return caseRunOf(evalCase, [accepted, ...run.events], { output: run.output });
  } finally {
    await close();
  }
}

async function liveCase(evalCase: EvalCase, options: RunCaseOptions): Promise<CaseRun> {
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-eval-'));
  const events: TroupeEvent[] = [];
  try {
    const { final } = await runTask({
      pipeline: options.pipeline,
      goal: evalCase.goal,
      ...(evalCase.input ? { input: evalCase.input } : {}),
      ...(evalCase.metadata ? { metadata: evalCase.metadata } : {}),
      workspaceRoot,
      onEvent: (event) => events.push(event),
      onlineScoring: false,
      approvals: options.approvals ?? 'deny',
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    // The final event is the listener's too, unless a listener's copy was lost: the run's own ending stands.
    if (!events.some((e) => e.id === final.id)) events.push(final);
    return caseRunOf(evalCase, events, final.kind === 'task.completed' ? { output: final.data.output } : {});
  } finally {
    await rm(workspaceRoot, { recursive: true, force: true });
  }
}

/** A case's recording, made whole from the journal records and stored values it keeps. */
async function recordingOf(recorded: CaseRecording): Promise<Recording> {
  const recording = new Recording(recorded.taskId, recorded.events);
  const journal: JournalReader = { entry: async (key) => recorded.journal[key] };
  await recording.restore(journal);
  await recording.restoreValues(valuesOf(recorded));
  return recording;
}

function valuesOf(recorded: CaseRecording): ValueReader {
  return {
    read: async (ref) => {
      const value = recorded.values[`${ref.bucket}/${ref.name}`];
      if (value === undefined)
        throw new EvalsError(
          'incomplete_recording',
          `the recording of task ${recorded.taskId} keeps no value ${ref.bucket}/${ref.name}`,
        );
      return value;
    },
  };
}
