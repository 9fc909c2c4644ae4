import {
  Dataset,
  DatasetSummary,
  EVALS_BUCKET,
  type EvalCase,
  Experiment,
  ExperimentSummary,
  type ScorerSpec,
} from '@troupe/protocol';
import { ObjectBucket, type ObjectBucketConnection, permissionRefusal } from '@troupe/runtime/bus';
import type { z } from 'zod';
import { OperationError } from './operationError.ts';

/** What {@link EvalStore.putDataset} is given: a dataset's content, to store as its next version. */
export interface NewDataset {
  name: string;
  description?: string;
  scorers: ScorerSpec[];
  cases: EvalCase[];
}

const datasetObject = (name: string, version: number) => `datasets/${name}/${version}`;
const experimentObject = (id: string) => `experiments/${id}`;

/**
 * Datasets and experiments of evals, in the NATS object store `troupe-evals`: each version of a dataset is the
 * object `datasets/<name>/<version>` and each experiment `experiments/<id>`, as JSON. Each object's `metadata`
 * holds its summary (`summary`, JSON), so a listing reads the objects' descriptions and no object's body. Reads use
 * plain message gets (as `ValueStore` does), never a consumer, so a user who may only read needs no right to make
 * consumers. The bucket is made on the first write; until then reads answer empty or undefined.
 *
 * @example
 * const store = new EvalStore(bus);
 * const { version } = await store.putDataset({ name: 'support', scorers: [], cases });
 * const latest = await store.dataset('support');
 */
export class EvalStore {
  readonly #bucket: ObjectBucket;

  constructor(bus: ObjectBucketConnection) {
    this.#bucket = new ObjectBucket(
      bus,
      EVALS_BUCKET,
      'Troupe: eval datasets (each version) and experiments',
    );
  }

  /**
   * Makes the bucket when it does not exist, kept on `replicas` servers: a coordinator does at start, so that a user
   * who may store datasets and experiments but not make streams (an evaluator, docs/permissions.md) finds it there.
   */
  ensureBucket(replicas?: number): Promise<void> {
    return this.#bucket.ensure(replicas === undefined ? {} : { replicas });
  }

  /** Stores a dataset as its next version (the highest stored plus one, 1 for a new name), made now. */
  async putDataset(content: NewDataset): Promise<Dataset> {
    return (await this.addDataset(content.name, () => content)).dataset;
  }

  /**
   * Stores the next version of dataset `name`, made by `next` from the newest stored (undefined for a new name).
   * A version is written only if no writer has stored it meanwhile (the object store's description is written
   * expecting none under that name); when one has, `next` is given that newer version and the write tried again,
   * so two writers adding at once (two gateways, a gateway and the CLI) both keep what they added.
   */
  async addDataset(
    name: string,
    next: (previous: Dataset | undefined) => NewDataset | Promise<NewDataset>,
  ): Promise<{ dataset: Dataset; previous: Dataset | undefined }> {
    for (let attempt = 1; ; attempt += 1) {
      const previous = await this.dataset(name);
      const content = await next(previous);
      const dataset = Dataset.parse({
        ...content,
        name,
        version: (previous?.version ?? 0) + 1,
        createdAt: new Date().toISOString(),
      });
      const summary: DatasetSummary = {
        name: dataset.name,
        version: dataset.version,
        createdAt: dataset.createdAt,
        cases: dataset.cases.length,
        recorded: dataset.cases.filter((c) => c.recording !== undefined).length,
        ...(dataset.description === undefined ? {} : { description: dataset.description }),
      };
      if (await this.#put(datasetObject(name, dataset.version), dataset, summary, { onlyNew: true }))
        return { dataset, previous };
      if (attempt === MAX_ADD_ATTEMPTS) {
        throw new OperationError(
          'conflict',
          `dataset ${name} version ${dataset.version} was stored by another writer each of ${MAX_ADD_ATTEMPTS} times this add tried; add again`,
        );
      }
    }
  }

  /** A dataset's version, or its newest when none is given; undefined when it is not stored. */
  async dataset(name: string, version?: number): Promise<Dataset | undefined> {
    const wanted =
      version ?? Math.max(0, ...(await this.datasets()).filter((d) => d.name === name).map((d) => d.version));
    if (wanted === 0) return undefined;
    return this.#read(datasetObject(name, wanted), Dataset);
  }

  /** Every version of every dataset, the newest first. */
  async datasets(): Promise<DatasetSummary[]> {
    const summaries = await this.#summaries('datasets/', DatasetSummary);
    return summaries.sort(
      (a, b) =>
        b.createdAt.localeCompare(a.createdAt) || a.name.localeCompare(b.name) || b.version - a.version,
    );
  }

  /**
   * Stores an experiment under its id. An id stored already is refused (`conflict`; nothing is written) unless
   * `replace`, so a run named like another's baseline does not replace it unawares.
   */
  async putExperiment(experiment: Experiment, options: { replace?: boolean } = {}): Promise<void> {
    const stored = Experiment.parse(experiment);
    const summary: ExperimentSummary = {
      id: stored.id,
      dataset: stored.dataset,
      mode: stored.mode,
      startedAt: stored.startedAt,
      totals: stored.totals,
      pipeline: { name: stored.pipeline.name, hash: stored.pipeline.hash },
    };
    const written = await this.#put(experimentObject(stored.id), stored, summary, {
      onlyNew: !options.replace,
    });
    if (!written)
      throw new OperationError(
        'conflict',
        `experiment ${stored.id} is stored already: give this one another id (troupe eval run --name), or replace it (--replace; putExperiment's replace option)`,
      );
  }

  /** An experiment; undefined when none is stored under the id. */
  experiment(id: string): Promise<Experiment | undefined> {
    return this.#read(experimentObject(id), Experiment);
  }

  /** Every experiment, the newest first. */
  async experiments(): Promise<ExperimentSummary[]> {
    const summaries = await this.#summaries('experiments/', ExperimentSummary);
    return summaries.sort((a, b) => b.startedAt.localeCompare(a.startedAt) || a.id.localeCompare(b.id));
  }

  /** Writes an object; false when `onlyNew` and something was stored under its name already. */
  async #put(
    name: string,
    value: unknown,
    summary: unknown,
    options: { onlyNew?: boolean } = {},
  ): Promise<boolean> {
    const bytes = new TextEncoder().encode(JSON.stringify(value));
    return this.#bucket
      .put(name, bytes, { summary: JSON.stringify(summary) }, options)
      .catch(refusedTo(`store datasets or experiments in ${EVALS_BUCKET}`, 'an evaluator or the gateway'));
  }

  /** The summaries the objects under `prefix` keep in their metadata; those that do not parse are passed over. */
  async #summaries<S extends z.ZodType>(prefix: string, schema: S): Promise<z.infer<S>[]> {
    const summaries: z.infer<S>[] = [];
    const listed = await this.#bucket.list(prefix).catch(refusedTo(`read ${EVALS_BUCKET}`, READERS));
    for (const { metadata } of listed) {
      const parsed = schema.safeParse(jsonOrUndefined(metadata.summary ?? ''));
      if (parsed.success) summaries.push(parsed.data);
    }
    return summaries;
  }

  /** An object's body checked against `schema`; undefined when the object (or the bucket) is not there. */
  async #read<S extends z.ZodType>(name: string, schema: S): Promise<z.infer<S> | undefined> {
    const bytes = await this.#bucket.read(name).catch(refusedTo(`read ${EVALS_BUCKET}`, READERS));
    if (bytes === undefined) return undefined;
    const parsed = schema.safeParse(jsonOrUndefined(new TextDecoder().decode(bytes)));
    if (!parsed.success) {
      const what = name.startsWith('datasets/') ? 'dataset' : 'experiment';
      throw new Error(
        `object ${name} of ${EVALS_BUCKET} is not a ${what} this version of Troupe reads: ${parsed.error.issues[0]?.message ?? 'not JSON'}`,
      );
    }
    return parsed.data;
  }
}

/** How often an add tries again after another writer stored the version it meant to. */
const MAX_ADD_ATTEMPTS = 5;

/** The roles `troupe nats-config` lets read the bucket. */
const READERS = 'an evaluator or the gateway';

/**
 * The server's refusal of this client's user, said plainly with the roles that may (nats.js says only "Permissions
 * Violation"); any other failure is thrown as it is.
 */
const refusedTo =
  (what: string, who: string) =>
  (error: unknown): never => {
    const refusal = permissionRefusal(error);
    if (refusal === undefined) throw error;
    if (refusal.message.includes('$JS.API.STREAM.CREATE.')) {
      throw new OperationError(
        'unavailable',
        `the object store ${EVALS_BUCKET} does not exist, and this NATS user may not make it (${refusal.message}): ` +
          'a coordinator makes it when it starts (docs/permissions.md)',
        { cause: error },
      );
    }
    throw new OperationError(
      'unavailable',
      `this NATS user may not ${what} (${refusal.message}); ${who} may (docs/permissions.md)`,
      { cause: error },
    );
  };

function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
