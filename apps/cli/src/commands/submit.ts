import { readFile } from 'node:fs/promises';
import { text } from 'node:stream/consumers';
import { OperationError, submitToPipeline } from '@troupe/client';
import { isName, type TaskSubmission, type TroupeEvent } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { openEventFeed } from '../eventFeed.ts';
import { formatEvent } from '../format/formatEvent.ts';
import { awaitScore, scoreTracker } from '../onlineScore.ts';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';
import { untilEnded } from '../taskEnding.ts';
import { formatTaskResult, taskResultOf } from '../taskResult.ts';
import { checkedTask, newTaskId } from '../taskToSubmit.ts';
import { finalTracker } from '../watch.ts';
import { workflowRecord, workflowsIfAny } from '../workflowRecords.ts';

export interface SubmitOptions extends ServerOptions {
  id?: string;
  input?: string;
  inputFile?: string;
  meta: string[];
  wait: boolean;
  timeout: number;
  json: boolean;
}

/**
 * `troupe submit`: validates the task here, stores it in the TASKS stream, and with --wait follows it to the end and
 * prints what it left: its output and where its files are.
 */
export async function submit(pipeline: string, goal: string, options: SubmitOptions): Promise<number> {
  if (!isName(pipeline)) throw new CliError(`"${pipeline}" is not a pipeline name (a-z, 0-9 and "-")`, 2);
  const task = await buildTask(goal, options);
  const bus = await connectCli(options, 'troupe-submit');
  try {
    // Its own pipeline's events, not any: a user allowed to read only that pipeline's may wait for it.
    const final = finalTracker();
    const score = scoreTracker();
    const watcher = options.wait
      ? await openEventFeed(bus, {
          taskId: task.id,
          pipeline,
          live: true,
          invalid: false,
          onEvent: (event) => {
            print(event, options.json);
            final.note(event);
            score.note(event);
          },
        })
      : undefined;
    const submitted = await submitToPipeline(bus, pipeline, task).catch((error) => {
      watcher?.stop();
      if (OperationError.is(error, 'not_found'))
        throw new CliError(`${error.message}. Start one with \`troupe up <pipeline.yaml>\`.`);
      if (OperationError.is(error, 'no_coordinator'))
        throw new CliError(`${error.message}; start one with \`troupe up <pipeline.yaml>\``);
      return explain(error);
    });
    const duplicate = submitted.duplicate;
    if (duplicate) {
      const status = submitted.record?.status;
      process.stderr.write(
        `task ${task.id} was already submitted; not run again${status ? ` (it is ${status})` : ''}\n`,
      );
      if (status !== 'running' || !watcher) {
        watcher?.stop();
        // Waiting for a task that has ended: what it left, as for one that ends now (with --json, its line alone:
        // it names the task, and every line stays JSON).
        const ended = watcher ? submitted.record?.final : undefined;
        if (!(ended && options.json)) process.stdout.write(`${task.id}\n`);
        if (ended) await printResult(bus, ended, options);
        return status === 'failed' || status === 'cancelled' ? 1 : 0;
      }
    }
    if (!watcher) {
      process.stdout.write(`${task.id}\n`);
      return 0;
    }
    process.stderr.write(
      duplicate
        ? `following ${task.id} until it finishes\n`
        : `submitted ${task.id} to ${pipeline}; waiting for it to finish\n`,
    );
    // The task's record says when it ended too: should a failover cost the live final event, it is read from the
    // stream again, else taken from the record.
    const deadline = Date.now() + options.timeout * 1_000;
    const timedOut = timeout(options.timeout);
    const ended = workflowsIfAny(bus).then((store) =>
      untilEnded({
        taskId: task.id,
        store,
        feed: watcher,
        final,
        print: (event) => {
          print(event, options.json);
          final.note(event);
          score.note(event);
        },
      }),
    );
    // Once the wait has timed out, nothing is left to tell of a later failure (the connection closing under it).
    ended.catch(() => undefined);
    const code = await Promise.race([ended, timedOut]);
    if (code === undefined) {
      watcher.stop();
      process.stderr.write(`task ${task.id} did not finish within ${options.timeout} s; it keeps running\n`);
      return 3;
    }
    // Its online score follows the final event when the evals: block of its version samples it: shown before the
    // result, waited for no longer than its scorers' time limit nor what --timeout leaves, and not at all once a
    // Ctrl-C comes (the result is printed all the same). The exit code is the task's, whatever comes.
    const interrupted = new AbortController();
    const interrupt = () => interrupted.abort();
    process.once('SIGINT', interrupt);
    try {
      const version = (await workflowRecord(bus, task.id).catch(() => undefined))?.version;
      await awaitScore(bus, { taskId: task.id, pipeline, version }, score, {
        signal: interrupted.signal,
        until: { at: deadline, by: '--timeout' },
      });
    } finally {
      process.off('SIGINT', interrupt);
    }
    watcher.stop();
    // What the task left: its output, whole, and where its files are (a last JSON line with --json).
    if (final.current) await printResult(bus, final.current, options);
    return code;
  } finally {
    await bus.close();
  }
}

async function buildTask(goal: string, options: SubmitOptions): Promise<TaskSubmission & { id: string }> {
  let input: unknown;
  const [flag, text] =
    options.inputFile === undefined
      ? ['--input', options.input]
      : ['--input-file', await readInputFile(options.inputFile)];
  if (text !== undefined) {
    try {
      input = JSON.parse(text);
    } catch (error) {
      throw new CliError(`${flag} is not JSON: ${(error as Error).message}`, 2);
    }
  }
  const metadata = Object.fromEntries(
    options.meta.map((pair) => {
      const at = pair.indexOf('=');
      if (at < 1) throw new CliError(`--meta takes key=value, got "${pair}"`, 2);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
  const candidate = {
    id: options.id ?? newTaskId(),
    goal,
    ...(input === undefined ? {} : { input }),
    ...(options.meta.length > 0 ? { metadata } : {}),
  };
  return checkedTask(candidate);
}

async function readInputFile(path: string): Promise<string> {
  try {
    return path === '-' ? await text(process.stdin) : await readFile(path, 'utf8');
  } catch (error) {
    throw new CliError(`cannot read --input-file ${path}: ${(error as Error).message}`, 2);
  }
}

/** The task's output and where its files are: text after its events, or a last JSON line (no `kind`) with --json. */
async function printResult(bus: JetStreamBus, final: TroupeEvent, options: SubmitOptions): Promise<void> {
  const result = await taskResultOf(bus, final, options);
  process.stdout.write(options.json ? `${JSON.stringify(result)}\n` : formatTaskResult(result));
}

function print(event: TroupeEvent, json: boolean): void {
  process.stdout.write(
    `${json ? JSON.stringify(event) : formatEvent(event, { color: process.stdout.isTTY })}\n`,
  );
}

const timeout = (seconds: number) =>
  new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), seconds * 1_000).unref());
