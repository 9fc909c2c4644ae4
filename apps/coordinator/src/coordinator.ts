import { hostname } from 'node:os';
import { EvalStore, PipelineRegistry, readTaskEvents, readValues } from '@troupe/client';
import { BUCKETS, HumanRequest, type PipelineVersion, QueuedTask, WorkflowRecord } from '@troupe/protocol';
import {
  type BusSubscription,
  type Clock,
  closeTaskRequests,
  EventFactory,
  ensureTroupeStreams,
  holdTaskRequests,
  type JetStreamBus,
  KvStore,
  type Logger,
  NatsHumanGate,
  StepJournal,
  systemClock,
  type ToolRegistry,
  throughOutages,
  underPrefix,
  untilReachable,
  ValueStore,
  withTimeout,
} from '@troupe/runtime';
import { type AgentServiceOptions, startAgentService } from './agents/agentService.ts';
import { builtinTools } from './config/builtinTools.ts';
import { ConfigError } from './config/configError.ts';
import { type LoadedPipeline, loadStoredVersion } from './config/loadPipeline.ts';
import { NewestVersion } from './config/newestVersion.ts';
import { PipelineConfig } from './config/pipelineSchema.ts';
import { shortVersion } from './config/pipelineVersion.ts';
import { introducedAt, PipelineVersions } from './config/pipelineVersions.ts';
import { pruneVersions, type VersionsByPipeline } from './config/versionRetention.ts';
import { startControlResponder } from './control/controlResponder.ts';
import { OnlineScoring } from './evals/onlineScoring.ts';
import { startIntakeGuard } from './intake/intakeGuard.ts';
import { registrationOf } from './intake/pipelineRegistry.ts';
import { natsTaskIntake } from './intake/taskQueue.ts';
import {
  type PipelineRunner,
  type PipelineRunnerOptions,
  startPipelineRunner,
} from './workflow/pipelineRunner.ts';
import { createSubPipelineRunner } from './workflow/subPipeline.ts';

/** Each pipeline runner's settings, which the coordinator passes on as given: documented on {@link PipelineRunnerOptions}. */
const RUNNER_SETTINGS = [
  'maxInFlight',
  'ackWaitMs',
  'maxDeliver',
  'noResponderWaitMs',
  'stepHeartbeatMs',
  'finalEventWaitMs',
  'limits',
  'passivateAfterMs',
  'checkpointLingerMs',
] as const satisfies readonly (keyof PipelineRunnerOptions)[];
type RunnerSettings = Pick<PipelineRunnerOptions, (typeof RUNNER_SETTINGS)[number]>;

/** Tasks per pipeline a coordinator works on at once when not told (see {@link PipelineRunnerOptions.concurrency}). */
const DEFAULT_CONCURRENCY = 16;

export interface CoordinatorOptions
  extends RunnerSettings,
    Partial<Pick<PipelineRunnerOptions, 'concurrency'>>,
    Pick<AgentServiceOptions, 'metrics'> {
  bus: JetStreamBus;
  pipelines: readonly LoadedPipeline[];
  logger: Logger;
  /** Task workspaces live under `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  /** Host the pipelines' agents in this process too (default true); false leaves them to workers. */
  hostAgents?: boolean;
  /**
   * With `hostAgents`, the most steps in flight on a pipeline's host here for one more step of this coordinator's own
   * workflows to run in-process, with no NATS hop; past it, steps go over NATS to any worker (workers elsewhere take
   * the overflow). Default: `concurrency`; 0 sends every step over NATS.
   */
  maxLocalSteps?: number;
  /**
   * How long (ms) and how much (bytes) of the `EVENTS` stream is kept; the oldest events go first. Unset, a new
   * stream keeps 7 days with no size limit, and a stream that exists keeps what it has.
   */
  eventRetention?: { maxAgeMs?: number; maxBytes?: number };
  /** How many servers of a JetStream cluster keep each stream and bucket (3 in a three-node cluster). */
  replicas?: number;
  /**
   * New tasks start on this coordinator's versions of its pipelines, even where the registry names one introduced
   * later: a `troupe up` on its own embedded server is the only coordinator there, so its file is the truth (an edit
   * undone by hand goes back into use). Coordinators that share a server leave it unset, so an older one restarting
   * rolls nothing back (`troupe versions use` does, on purpose).
   */
  takeNewest?: boolean;
  registry?: ToolRegistry;
  clock?: Clock;
}

/** A running coordinator. */
export interface Coordinator {
  readonly pipelines: readonly string[];
  /** Task ids this process is running now. */
  running(): string[];
  /** How many of them are passivated now (`passivateAfterMs`): their actor trees stopped while they wait. */
  passivated(): number;
  /**
   * How many steps its agents (`hostAgents`) have parked now, from its tasks or any other coordinator's: their agent
   * actors let go while their model calls wait (`passivateAfterMs` too).
   */
  parkedSteps(): number;
  /**
   * Makes a new version of one of its pipelines (its file, loaded again) the one new tasks start on, without a
   * restart: stored, compiled, its new agents served, then registered as the newest. Tasks already running finish on
   * the version they started on, read from the `versions` bucket as after a restart. Refuses, changing nothing, a
   * pipeline it does not run or one its agents cannot run here (`ConfigError`).
   */
  reload(pipeline: LoadedPipeline): Promise<PipelineReload>;
  /** Stops taking tasks; running ones are handed back to NATS to be resumed by a coordinator. */
  stop(): Promise<void>;
}

/**
 * Starts the service for a set of loaded pipelines: sets up the streams and buckets, registers the pipelines,
 * consumes their tasks (one workflow actor per task), and hosts their agents unless told not to.
 *
 * @example
 * const pipeline = await loadPipeline('examples/demo.yaml', { toolNames: builtinTools().names() });
 * const coordinator = await startCoordinator({ bus, pipelines: [pipeline], logger, workspaceRoot: '.troupe/work' });
 */
export async function startCoordinator(options: CoordinatorOptions): Promise<Coordinator> {
  const { bus } = options;
  const clock = options.clock ?? systemClock;
  const registry = options.registry ?? builtinTools();
  // The guard listens before `TASKS` exists, so a task stored the moment the stream appears is run or reported.
  const local = new Set(options.pipelines.map((p) => p.config.name));
  let registryOpened: (registry: PipelineRegistry) => void = () => {};
  let registryFailed: (error: unknown) => void = () => {};
  const registryOpen = new Promise<PipelineRegistry>((resolve, reject) => {
    registryOpened = resolve;
    registryFailed = reject;
  });
  // Nothing may wait on it yet: a start-up that fails says so itself.
  registryOpen.catch(() => {});
  const knownPipelines = async () => {
    // A start-up still waiting for JetStream must not pile up a guard's handlers, one per task message.
    const opened = await withTimeout(registryOpen, GUARD_REGISTRY_WAIT_MS, { unref: true });
    if (opened === 'timeout')
      throw new Error('the pipeline registry is not open yet: JetStream is still starting');
    return opened.names();
  };
  const guard: BusSubscription = startIntakeGuard(bus, local, knownPipelines);
  try {
    return await startParts(options, { clock, registry, local, guard, registryOpened });
  } catch (error) {
    guard.unsubscribe();
    registryFailed(error);
    throw error;
  }
}

/** What a reload changed: the version new tasks started on before (when there was one), and the one they start on now. */
export interface PipelineReload {
  pipeline: string;
  from?: string;
  to: string;
}

/** How long the intake guard waits for the registry while its coordinator starts, before it lets a task pass. */
const GUARD_REGISTRY_WAIT_MS = 5_000;

/**
 * The versions of `pipelines` still needed: the newest each has in the registry, and those its `running` tasks run
 * on. Every task's record is read, once for all of them (the bucket has no index by status).
 */
async function versionsInUse(
  store: KvStore<typeof WorkflowRecord>,
  registry: PipelineRegistry,
  pipelines: readonly string[],
): Promise<VersionsByPipeline> {
  const used = new Map(pipelines.map((name) => [name, new Set<string>()]));
  for (const name of pipelines) {
    const newest = (await registry.get(name))?.version;
    if (newest !== undefined) used.get(name)?.add(newest);
  }
  for (const record of await readValues(store)) {
    if (record.status === 'running' && record.version) used.get(record.pipeline)?.add(record.version);
  }
  return used;
}

/** The coordinator's parts past its intake guard, started in order: streams, stores, agents, runners, registry. */
async function startParts(
  options: CoordinatorOptions,
  started: {
    clock: Clock;
    registry: ToolRegistry;
    /** The names of the pipelines it runs. */
    local: ReadonlySet<string>;
    guard: BusSubscription;
    registryOpened: (registry: PipelineRegistry) => void;
  },
): Promise<Coordinator> {
  const { bus, logger } = options;
  const { clock, registry, guard } = started;
  const retention = options.eventRetention;
  await ensureTroupeStreams(bus, {
    ...(retention?.maxAgeMs === undefined ? {} : { eventsMaxAge: retention.maxAgeMs }),
    ...(retention?.maxBytes === undefined ? {} : { eventsMaxBytes: retention.maxBytes }),
    ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
  });
  const pipelineRegistry = await PipelineRegistry.open(bus);
  started.registryOpened(pipelineRegistry);
  const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  const queued = await KvStore.open(bus, BUCKETS.queued, QueuedTask);
  const journal = await StepJournal.open(bus);
  // Each pipeline's version is stored before any task can start on it, so any coordinator can run that task.
  const versions = await PipelineVersions.open(bus);
  const stored = new Map<string, PipelineVersion>();
  for (const { version } of options.pipelines) {
    // Stamped now, not when the file was loaded: which version is newer is told by when each was first stored.
    const saving = { ...version, storedAt: new Date(clock.now()).toISOString() };
    stored.set(version.pipeline, await versions.save(saving));
  }
  // Each pipeline's bucket of large values is made here, with the tasks' retention and the deployment's replicas.
  const values = new ValueStore(bus, options.replicas === undefined ? {} : { replicas: options.replicas });
  for (const { config } of options.pipelines) {
    await untilReachable(bus, `object store of pipeline ${config.name}`, () =>
      values.ensureBucket(config.name),
    );
  }
  // So is the evals' bucket of datasets and experiments: an evaluator's user may write objects, not make a stream.
  await untilReachable(bus, 'object store of evals', () => new EvalStore(bus).ensureBucket(options.replicas));
  const approvals = await KvStore.open(bus, BUCKETS.approvals, HumanRequest);
  // Asks for `human` steps. A wait cut short by the workflow (a branch stopped, the task cancelled) closes its
  // question; one cut short by this coordinator stopping leaves it pending for the run that resumes the task.
  const people = new NatsHumanGate({
    bus,
    store: approvals,
    events: new EventFactory(clock),
    clock,
    logger,
    timeoutMs: 300_000,
  });

  const agents =
    (options.hostAgents ?? true)
      ? await startAgentService({
          bus,
          pipelines: options.pipelines,
          logger,
          workspaceRoot: options.workspaceRoot,
          registry,
          clock,
          values,
          maxLocalSteps: options.maxLocalSteps ?? options.concurrency ?? DEFAULT_CONCURRENCY,
          // One setting for both halves of a task that waits: its tree here, its step's agent actor there.
          ...(options.passivateAfterMs === undefined ? {} : { parkAfterMs: options.passivateAfterMs }),
          ...(options.metrics ? { metrics: options.metrics } : {}),
        })
      : undefined;
  const runners: PipelineRunner[] = [];
  // Each pipeline's newest version as the registry names it, followed here: a new task reads the copy, no message.
  const newest = new Map<string, NewestVersion>();
  // Each pipeline's online scoring (its `evals:` block), told of its tasks' ends by its runner.
  const scoring = new Map<string, OnlineScoring>();
  try {
    for (const pipeline of options.pipelines) {
      const newestVersion = await NewestVersion.start({
        pipeline: pipeline.config.name,
        read: async () => (await pipelineRegistry.get(pipeline.config.name))?.version,
        onStatus: (listener) => bus.onStatus(listener),
        clock,
        logger: logger.child({ pipeline: pipeline.config.name }),
      });
      newest.set(pipeline.config.name, newestVersion);
      const online = new OnlineScoring(pipeline, {
        bus,
        events: new EventFactory(clock),
        clock,
        logger: logger.child({ pipeline: pipeline.config.name }),
        taskEvents: (taskId, name) => readTaskEvents(bus, taskId, name),
        values,
        // A task of another stored version is scored by that version's evals: block; a judge's key is asked at use.
        loadVersion: async (hash) => {
          const version = await versions.get(pipeline.config.name, hash);
          const label = `pipeline ${pipeline.config.name} version ${shortVersion(hash)}`;
          return version && loadStoredVersion(version, label, { requireKeys: false });
        },
      });
      scoring.set(pipeline.config.name, online);
      // What this pipeline's tasks asked of people is kept under its name.
      const pipelineJournal = journal.forPipeline(pipeline.config.name);
      const pipelineRequests = underPrefix(approvals, pipeline.config.name);
      runners.push(
        await startPipelineRunner({
          ...runnerSettings(options),
          bus,
          intake: natsTaskIntake(bus),
          config: pipeline.config,
          version: pipeline.version.hash,
          // The copy, read again every second: a coordinator started with another version is followed within it.
          newest: () => newestVersion.newest(),
          versionHashes: () => versions.hashes(pipeline.config.name),
          loadVersion: async (hash) => {
            const stored = await versions.get(pipeline.config.name, hash);
            return stored && PipelineConfig.parse(stored.config);
          },
          store,
          logger: logger.child({ pipeline: pipeline.config.name }),
          clock,
          concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
          ...(agents ? { localSteps: agents.local } : {}),
          people: { gate: people, journal: pipelineJournal, clock },
          subPipelines: createSubPipelineRunner(bus, clock, values),
          values,
          queued,
          closeRequests: (taskId, ending) =>
            closeTaskRequests(taskId, ending, {
              journal: pipelineJournal,
              store: pipelineRequests,
              now: () => clock.now(),
            }),
          holdRequests: (taskId, change) =>
            holdTaskRequests(taskId, change, {
              journal: pipelineJournal,
              store: pipelineRequests,
              now: () => clock.now(),
            }),
          ended: (final, version) => online.ended(final, version),
        }),
      );
    }
    // Registered once their consumers exist, so a task the registry lets through is never lost.
    const host = `${hostname()}:${process.pid}`;
    for (const { config, version } of options.pipelines) {
      const mine = stored.get(config.name) ?? version;
      // A version introduced later stays the newest: restarting a coordinator of an older file rolls nothing back.
      const isNewest = await pipelineRegistry.register(
        registrationOf(config, host, new Date(clock.now()), mine.hash),
        async (other) => {
          if (options.takeNewest) return false;
          const theirs = await throughOutages(() => versions.get(config.name, other));
          return theirs !== undefined && introducedAt(theirs) > introducedAt(mine);
        },
      );
      if (isNewest) newest.get(config.name)?.registered(mine.hash);
      else {
        logger.warn(
          { pipeline: config.name, version: mine.hash },
          `pipeline ${config.name}: version ${shortVersion(mine.hash)} of this coordinator is older than the newest, which new tasks keep starting on (troupe versions use changes that)`,
        );
      }
    }
    // Versions nothing needs any more go, in the background: a failure only leaves them stored.
    void pruneVersions({
      versions,
      keep: new Map(options.pipelines.map((p) => [p.config.name, new Set([p.version.hash])])),
      inUse: () => versionsInUse(store, pipelineRegistry, [...started.local]),
      now: clock.now(),
      logger,
    }).catch((error: unknown) =>
      logger.warn({ err: error }, 'cannot remove stored pipeline versions no task uses'),
    );
  } catch (error) {
    // Half started: stop what did start (MCP children among it) before reporting.
    await Promise.allSettled(runners.map((r) => r.stop()));
    await Promise.allSettled([...scoring.values()].map((s) => s.stop()));
    for (const copy of newest.values()) copy.stop();
    await agents?.stop();
    throw error;
  }
  const runsHere = (taskId: string) => runners.some((r) => r.running().includes(taskId));
  const controls: BusSubscription = startControlResponder({ bus, store, runsHere });

  async function reload(next: LoadedPipeline): Promise<PipelineReload> {
    const { config } = next;
    const runner = runners.find((r) => r.pipeline === config.name);
    if (!runner) {
      const why = `this coordinator runs no pipeline named ${config.name} (it runs ${[...started.local].join(', ')})`;
      throw new ConfigError(next.file, [{ path: 'name', message: why }]);
    }
    const issues = agents?.check(next) ?? [];
    if (issues.length > 0) throw new ConfigError(next.file, issues);
    const from = (await pipelineRegistry.get(config.name))?.version;
    const now = new Date(clock.now());
    // Introduced now, whatever was stored before: a save that undoes an edit puts the earlier version back in use.
    const saved = await versions.save({ ...next.version, storedAt: now.toISOString() });
    await versions.introduce(saved, now);
    // Compiled before any task can start on it, so a version the runner cannot run is never the newest.
    const unusable = await runner.prepare(saved.hash);
    if (unusable !== undefined) throw new Error(unusable);
    // Its agents are served before it is the newest: a task's first step on it finds them.
    await agents?.serveVersion(config.name, saved.hash);
    await pipelineRegistry.register(registrationOf(config, `${hostname()}:${process.pid}`, now, saved.hash));
    // This coordinator's own new tasks start on it from now on, not from its next read of the registry.
    newest.get(config.name)?.registered(saved.hash);
    // Prepared above, so it cannot be refused here.
    await runner.adopt(saved.hash);
    // Its scorers were checked as its file loaded: tasks that end from now on are scored by them.
    scoring.get(config.name)?.use(next);
    return { pipeline: config.name, ...(from === undefined ? {} : { from }), to: saved.hash };
  }

  return {
    pipelines: options.pipelines.map((p) => p.config.name),
    running: () => runners.flatMap((r) => r.running()),
    passivated: () => runners.reduce((sum, r) => sum + r.passivated(), 0),
    parkedSteps: () => agents?.parked() ?? 0,
    reload,
    async stop() {
      guard.unsubscribe();
      controls.unsubscribe();
      people.detach();
      await Promise.all(runners.map((r) => r.stop()));
      for (const copy of newest.values()) copy.stop();
      // After the runners, so no task ends after it: scorings at work are aborted, and their tasks go unscored.
      await Promise.all([...scoring.values()].map((s) => s.stop()));
      await agents?.stop();
      await bus.flush();
    },
  };
}

/** The settings of `options` each pipeline runner takes as given: those set, and no others. */
function runnerSettings(options: CoordinatorOptions): RunnerSettings {
  const settings: RunnerSettings = {};
  for (const key of RUNNER_SETTINGS) {
    if (options[key] !== undefined) Object.assign(settings, { [key]: options[key] });
  }
  return settings;
}
