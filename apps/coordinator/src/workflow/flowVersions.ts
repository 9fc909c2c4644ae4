import { errorMessage } from '@troupe/protocol';
import { type Logger, throughOutages } from '@troupe/runtime';
import { agentSteps, allSteps } from '../config/flowLayout.ts';
import { LoadCache } from '../config/loadCache.ts';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { shortVersion } from '../config/pipelineVersion.ts';
import type { WorkflowMachine } from './compileFlow.ts';

/** One version of a pipeline, as a runner runs it. */
export interface FlowVersion {
  hash: string;
  config: PipelineConfig;
  /** Its workflow machine, with the runner's steps. */
  machine: WorkflowMachine;
  /** The agent of each step, by the step's id (the workflow's state while it runs). */
  agentOfStep: ReadonlyMap<string, string>;
  /** Its `human` and `pipeline` steps: a task waiting only on them holds no working slot. */
  waitingSteps: ReadonlySet<string>;
}

/** Where a runner finds the pipeline's other versions (the `versions` bucket and the registry, in production). */
export interface VersionSource {
  /** The config of a stored version; undefined when none is stored. */
  load?: (hash: string) => Promise<PipelineConfig | undefined>;
  /** The newest version's hash, as the registry says. */
  newest?: () => Promise<string | undefined>;
  /** Every stored version's hash. */
  hashes?: () => Promise<string[]>;
}

export interface FlowVersionsOptions {
  pipeline: string;
  /** The pipeline as this coordinator loaded it, and its hash. */
  config: PipelineConfig;
  hash: string;
  /** Compiles a version's flow with the runner's steps. */
  compile: (config: PipelineConfig) => WorkflowMachine;
  source: VersionSource;
  logger: Logger;
}

/**
 * The versions of one pipeline a runner runs tasks on: its own, and any other a task started on (or is moved to),
 * read from the source and compiled once each, as their tasks come.
 */
export class FlowVersions {
  /** This coordinator's version: what a task from before versions were kept runs on. */
  readonly current: FlowVersion;
  /**
   * What a new task starts on when the source cannot say which version is newest: this coordinator's, until a reload
   * here makes its saved version the newest (as a restart with the saved file would make it this coordinator's).
   */
  #fallback: FlowVersion;
  readonly #o: FlowVersionsOptions;
  /** Only a flow is kept: a version missing now may be stored by the time it is asked for again. */
  readonly #flows = new LoadCache<FlowVersion | string>(
    (hash) => this.#load(hash),
    (flow) => typeof flow !== 'string',
  );

  constructor(options: FlowVersionsOptions) {
    this.#o = options;
    this.current = this.#compiled(options.config, options.hash);
    this.#fallback = this.current;
    this.#flows.set(options.hash, this.current);
  }

  /**
   * The flow of a version: read from the source when it is not this coordinator's; a string saying why when that
   * version cannot be had. No version (a task from before versions were kept): this coordinator's.
   */
  flowFor(hash: string | undefined): Promise<FlowVersion | string> {
    if (hash === undefined) return Promise.resolve(this.current);
    return this.#flows.get(hash);
  }

  /** The newest version's hash, as the source says; this coordinator's (or its last reload's) when it says none. */
  async newestHash(): Promise<string> {
    return (await this.#o.source.newest?.()) ?? this.#fallback.hash;
  }

  /** The flow a new task starts on: the newest version's, or this coordinator's when that cannot be had. */
  async newest(): Promise<FlowVersion> {
    const newest = await this.newestHash();
    if (newest === this.#fallback.hash) return this.#fallback;
    const flow = await this.flowFor(newest);
    if (typeof flow !== 'string') return flow;
    this.#o.logger.warn(
      { version: newest },
      `${flow}; new tasks start on this coordinator's version meanwhile`,
    );
    return this.#fallback;
  }

  /**
   * Makes version `hash` what new tasks fall back to when the source cannot say which is newest: a reload that made
   * it the newest. A string saying why when that version cannot be had (nothing changes then).
   */
  async adopt(hash: string): Promise<string | undefined> {
    const flow = await this.flowFor(hash);
    if (typeof flow === 'string') return flow;
    this.#fallback = flow;
    return undefined;
  }

  /** Every stored version's hash (this coordinator's alone when the source keeps none). */
  async hashes(): Promise<string[]> {
    return (await this.#o.source.hashes?.()) ?? [this.current.hash];
  }

  /** The stored version `prefix` names: the one hash that starts with it, or undefined when none or several do. */
  async named(prefix: string): Promise<string | undefined> {
    const matching = (await this.hashes()).filter((hash) => hash.startsWith(prefix));
    return matching.length === 1 ? matching[0] : undefined;
  }

  async #load(hash: string): Promise<FlowVersion | string> {
    const { pipeline, source, logger } = this.#o;
    const short = shortVersion(hash);
    const load = source.load;
    if (!load) return `this coordinator keeps no versions, and runs only ${shortVersion(this.current.hash)}`;
    try {
      const config = await throughOutages(() => load(hash));
      if (config === undefined) return `version ${short} of pipeline ${pipeline} is not stored`;
      logger.info({ version: hash }, `loaded version ${short} of pipeline ${pipeline} to run its tasks`);
      return this.#compiled(config, hash);
    } catch (error) {
      logger.error({ err: error, version: hash }, `cannot load version ${short} of pipeline ${pipeline}`);
      return `version ${short} of pipeline ${pipeline} cannot be loaded: ${errorMessage(error)}`;
    }
  }

  #compiled(config: PipelineConfig, hash: string): FlowVersion {
    return {
      hash,
      config,
      machine: this.#o.compile(config),
      agentOfStep: new Map(agentSteps(config.flow).map((step) => [step.id, step.agent])),
      waitingSteps: new Set(
        allSteps(config.flow)
          .filter((step) => step.kind === 'human' || step.kind === 'pipeline')
          .map((step) => step.id),
      ),
    };
  }
}
