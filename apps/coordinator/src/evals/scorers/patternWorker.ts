import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { CEL_OPTIONS } from '../../config/expressions.ts';
import { type CelData, celScorerEnvironment } from './celEnvironment.ts';

/** What the pattern thread evaluates: a regular expression against a text, or a CEL expression over a run's data. */
export type PatternJob =
  | { kind: 'regex'; pattern: string; flags?: string; text: string }
  | { kind: 'cel'; expr: string; data: CelData };

/** The thread's answer to one job: its result, or the message of what it threw. */
export type PatternAnswer =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; message: string };

interface Pending {
  id: number;
  job: PatternJob;
  signal: AbortSignal | undefined;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  onAbort: () => void;
}

/**
 * Runs regex and CEL scorers on one long-lived worker thread, a job at a time, so a pattern that backtracks
 * catastrophically on a model's output stalls neither the coordinator's event loop (its heartbeats, acks and other
 * tasks) nor a scorer's time limit: when the signal of the job at work aborts (its scorer's `timeoutMs` passed), the
 * thread is terminated and the job fails; the jobs queued behind it go on, on a new thread made when next needed.
 * The thread is unref'd: it keeps no process alive.
 */
export class PatternWorker {
  #worker: Worker | undefined;
  #nextId = 0;
  #current: Pending | undefined;
  readonly #queue: Pending[] = [];

  /** The job's result; rejects with what it threw, or when `signal` aborts first. */
  run(job: PatternJob, signal?: AbortSignal): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(stopped());
        return;
      }
      this.#nextId += 1;
      const pending: Pending = { id: this.#nextId, job, signal, resolve, reject, onAbort: () => {} };
      pending.onAbort = () => this.#abort(pending);
      signal?.addEventListener('abort', pending.onAbort, { once: true });
      this.#queue.push(pending);
      this.#next();
    });
  }

  /** Ends the thread, failing the job at work and those queued. */
  async close(): Promise<void> {
    const all = [...(this.#current ? [this.#current] : []), ...this.#queue.splice(0)];
    this.#current = undefined;
    for (const pending of all) settle(pending, new Error('the pattern thread was closed'));
    const worker = this.#worker;
    this.#worker = undefined;
    await worker?.terminate();
  }

  #next(): void {
    if (this.#current) return;
    const pending = this.#queue.shift();
    if (!pending) return;
    this.#current = pending;
    this.#thread().postMessage({ id: pending.id, job: pending.job });
  }

  #abort(pending: Pending): void {
    const queued = this.#queue.indexOf(pending);
    if (queued >= 0) {
      this.#queue.splice(queued, 1);
      settle(pending, stopped());
      return;
    }
    if (this.#current !== pending) return;
    // The job may never return: only ending its thread stops it.
    this.#restart(stopped());
  }

  /** Ends the thread and fails the job at work with `error`; the queue goes on, on a new thread. */
  #restart(error: Error): void {
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker) {
      worker.removeAllListeners();
      void worker.terminate();
    }
    const current = this.#current;
    this.#current = undefined;
    if (current) settle(current, error);
    this.#next();
  }

  #thread(): Worker {
    if (this.#worker) return this.#worker;
    const worker = startThread();
    worker.on('message', (answer: PatternAnswer) => {
      const current = this.#current;
      if (!current || current.id !== answer.id) return;
      this.#current = undefined;
      if (answer.ok) settle(current, undefined, answer.value);
      else settle(current, new Error(answer.message));
      this.#next();
    });
    worker.on('error', (error) => this.#restart(new Error(`the pattern thread failed: ${error.message}`)));
    worker.on('exit', (code) => this.#restart(new Error(`the pattern thread stopped (exit code ${code})`)));
    // After the listeners: a 'message' listener added to an unref'd worker refs its port again (Node 20), and the
    // thread then kept `troupe eval run` from exiting once its report was printed.
    worker.unref();
    this.#worker = worker;
    return worker;
  }
}

function settle(pending: Pending, error: Error | undefined, value?: unknown): void {
  pending.signal?.removeEventListener('abort', pending.onAbort);
  if (error) pending.reject(error);
  else pending.resolve(value);
}

const stopped = () => new Error('stopped: the scorer was cancelled or ran out of time');

/**
 * The thread's whole program, plain JavaScript evaluated in a worker so it needs no loader for TypeScript and no file
 * beside a bundle: regular expressions and CEL programs are compiled once each (the last 100 kept). The CEL
 * environment is made by {@link celScorerEnvironment} itself, from its source text.
 */
const PROGRAM = `
const { parentPort, workerData } = require('node:worker_threads');
const patterns = new Map();
const programs = new Map();
let cel;
const environment = () => (cel ??= import(workerData.celUrl).then(({ Environment }) =>
  (${celScorerEnvironment.toString()})(Environment, workerData.celOptions)));
function kept(cache, key, make) {
  let value = cache.get(key);
  if (value === undefined) {
    if (cache.size >= 100) cache.clear();
    value = make();
    cache.set(key, value);
  }
  return value;
}
async function evaluate(job) {
  if (job.kind === 'regex') {
    const pattern = kept(patterns, (job.flags ?? '') + '/' + job.pattern, () => new RegExp(job.pattern, job.flags));
    pattern.lastIndex = 0; // a g or y flag makes test() start where the last match ended
    return pattern.test(job.text);
  }
  const { environment: env, variables } = await environment();
  return kept(programs, job.expr, () => env.parse(job.expr))(variables(job.data));
}
parentPort.on('message', ({ id, job }) => {
  evaluate(job).then(
    (value) => parentPort.postMessage({ id, ok: true, value }),
    (error) => parentPort.postMessage({ id, ok: false, message: String(error?.message ?? error) }),
  );
});
`;

function startThread(): Worker {
  return new Worker(PROGRAM, {
    eval: true,
    workerData: {
      celUrl: pathToFileURL(createRequire(import.meta.url).resolve('@marcbachmann/cel-js')).href,
      celOptions: CEL_OPTIONS,
    },
    resourceLimits: { maxOldGenerationSizeMb: 256 },
  });
}

/** The process's one pattern thread, made when a regex or CEL scorer first runs. */
export const patternWorker = new PatternWorker();
