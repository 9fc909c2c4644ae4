import { Worker } from 'node:worker_threads';
import { ToolError } from './toolError.ts';

/**
 * The worker's whole program: match lines against a pattern and answer with the indexes of the matching ones.
 * Plain JavaScript evaluated in the worker, so it needs no loader for TypeScript.
 */
const PROGRAM = `
const { parentPort, workerData } = require('node:worker_threads');
const regex = new RegExp(workerData.pattern, workerData.flags);
parentPort.on('message', ({ lines, max }) => {
  const hits = [];
  for (let i = 0; i < lines.length && hits.length < max; i++) if (regex.test(lines[i])) hits.push(i);
  parentPort.postMessage(hits);
});
`;

/**
 * Runs a regular expression written by a model over file contents on a worker thread, so a pattern that
 * backtracks catastrophically stalls neither the agent host's event loop (its other steps, its heartbeats) nor
 * anything else: past `budgetMs` of matching in all (reading files does not count), or on abort, the worker is
 * terminated and the search fails.
 */
export class RegexWorker {
  readonly #worker: Worker;
  readonly #pattern: string;
  readonly #budgetMs: number;
  /** Time spent matching so far. */
  #spentMs = 0;
  readonly #signal: AbortSignal;

  constructor(regex: RegExp, budgetMs: number, signal: AbortSignal) {
    this.#pattern = regex.source;
    this.#budgetMs = budgetMs;
    this.#signal = signal;
    this.#worker = new Worker(PROGRAM, {
      eval: true,
      workerData: { pattern: regex.source, flags: regex.flags },
      resourceLimits: { maxOldGenerationSizeMb: 256 },
    });
    this.#worker.unref();
  }

  /** Indexes of the lines that match, at most `max`. */
  match(lines: readonly string[], max: number): Promise<number[]> {
    const worker = this.#worker;
    return new Promise((resolve, reject) => {
      const started = Date.now();
      const settle = (error?: Error, hits?: number[]) => {
        this.#spentMs += Date.now() - started;
        clearTimeout(timer);
        this.#signal.removeEventListener('abort', onAbort);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
        if (error) {
          void worker.terminate();
          reject(error);
        } else resolve(hits ?? []);
      };
      const onMessage = (hits: number[]) => settle(undefined, hits);
      const onError = (error: Error) =>
        settle(new ToolError('failed', `search_files: the pattern could not run: ${error.message}`));
      const onAbort = () => settle(new ToolError('cancelled', 'search_files was stopped'));
      const onExit = (code: number) =>
        settle(new ToolError('failed', `search_files: the matching thread stopped (exit code ${code})`));
      const timer = setTimeout(
        () =>
          settle(
            new ToolError(
              'timeout',
              `search_files: /${this.#pattern}/ took too long to match (it may backtrack catastrophically); ` +
                'simplify the pattern or narrow the path or glob',
            ),
          ),
        Math.max(0, this.#budgetMs - this.#spentMs),
      );
      if (this.#signal.aborted) return onAbort();
      this.#signal.addEventListener('abort', onAbort, { once: true });
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.once('exit', onExit);
      worker.postMessage({ lines, max });
    });
  }

  close(): Promise<number> {
    return this.#worker.terminate();
  }
}
