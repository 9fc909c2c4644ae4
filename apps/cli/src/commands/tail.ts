import type { TroupeEvent } from '@troupe/protocol';
import { endingOfRecord, type WorkflowRecord } from '@troupe/protocol';
import { describeEnding, endingOf } from '@troupe/runtime';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { openEventFeed } from '../eventFeed.ts';
import { eventFilter, parseKinds } from '../eventFilter.ts';
import { parseDuration } from '../format/duration.ts';
import { formatEvent, formatInvalid } from '../format/formatEvent.ts';
import { awaitScore, scoreTracker, scoreWaitOf } from '../onlineScore.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { finalTracker } from '../watch.ts';
import { workflowRecord } from '../workflowRecords.ts';

export interface TailOptions extends ServerOptions {
  task?: string;
  pipeline?: string;
  json: boolean;
  /** Show the events stored this long ago first, e.g. `5m`. */
  since?: string;
  agent?: string;
  /** `--kind` values, each one kind or several comma-separated. */
  kind?: string[];
}

/**
 * `troupe tail`: prints the message flow, one line per event, until interrupted. With `--since`, the stored events
 * of that time first; with `--task`, that task's history first, and it stops when the task has ended.
 */
export async function tail(options: TailOptions): Promise<number> {
  if (options.task !== undefined) checkTaskId(options.task);
  const since = options.since === undefined ? undefined : sinceOf(options.since);
  const kinds = parseKinds(options.kind ?? []);
  const filter = eventFilter({
    ...(options.agent === undefined ? {} : { agent: options.agent }),
    kinds,
  });
  // An online score (eval.scored) follows the final event of a sampled task: waited for, unless filtered out.
  const showsScores = options.agent === undefined && (kinds.size === 0 || kinds.has('eval.scored'));
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-tail');
  // Listening from the start, so a Ctrl-C while the history is read, or just as it is done, ends tail cleanly.
  const stop = interruption();
  try {
    const taskId = options.task;
    const record = taskId === undefined ? undefined : await workflowRecord(bus, taskId);
    const color = process.stdout.isTTY && !options.json;
    const write = (line: string) => process.stdout.write(`${line}\n`);
    const show = (event: TroupeEvent) => {
      if (filter.event(event)) write(options.json ? JSON.stringify(event) : formatEvent(event, { color }));
    };
    const final = finalTracker();
    const score = scoreTracker();
    const ended = record !== undefined && record.status !== 'running';
    // A task that ended so lately that its online score may yet come: its events are followed live until it does.
    const scoreWait =
      ended && showsScores && taskId !== undefined && record.final !== undefined
        ? await scoreWaitOf(bus, { taskId, pipeline: record.pipeline, version: record.version })
        : undefined;
    const scoreDue = scoreWait !== undefined && Date.now() - Date.parse(record?.final?.ts ?? '') < scoreWait;
    const feed = await openEventFeed(bus, {
      ...(taskId === undefined ? {} : { taskId }),
      ...(options.pipeline === undefined ? {} : { pipeline: options.pipeline }),
      // A task's history is shown whole unless --since says otherwise; all tasks' only with --since.
      ...(taskId !== undefined || since !== undefined
        ? { history: since === undefined ? {} : { since } }
        : {}),
      live: !ended || scoreDue,
      invalid: taskId === undefined && filter.invalid,
      signal: stop.signal,
      onEvent: (event) => {
        show(event);
        if (taskId !== undefined) final.note(event);
        if (taskId !== undefined) score.note(event);
      },
      onInvalid: (event) => {
        if (options.pipeline && event.pipeline !== options.pipeline) return;
        write(options.json ? JSON.stringify(event) : formatInvalid(event, { color }));
      },
    });
    try {
      if (stop.signal.aborted) return 0;
      if (taskId !== undefined && ended) {
        if (final.current === undefined && record.final && storedSince(record.final, since))
          show(record.final);
        if (scoreDue && record.final) {
          const left = (scoreWait ?? 0) - (Date.now() - Date.parse(record.final.ts));
          await awaitScore(bus, record, score, { signal: stop.signal, known: left });
        }
        process.stderr.write(
          `task ${taskId} has finished: ${outcomeOf(record, final.current)}; nothing more will come\n`,
        );
        return 0;
      }
      /** The task's end: said, and its online score waited for (a bounded time) when one will come. */
      const finished = async (ending: TroupeEvent) => {
        process.stderr.write(`task ${taskId} has finished: ${outcomeOf(record, ending)}\n`);
        if (taskId === undefined || !showsScores) return;
        // Its version is recorded as it is claimed: a task not claimed when tail began is read again.
        const version = record?.version ?? (await workflowRecord(bus, taskId))?.version;
        await awaitScore(bus, { taskId, pipeline: ending.pipeline, version }, score, { signal: stop.signal });
      };
      if (final.current !== undefined) {
        await finished(final.current);
        return 0;
      }
      process.stderr.write(`watching ${taskId ? `task ${taskId}` : 'all tasks'}; Ctrl-C to stop\n`);
      const ending = await Promise.race([stop.received, final.arrived]);
      if (ending !== undefined) await finished(ending);
      return 0;
    } finally {
      feed.stop();
    }
  } finally {
    await bus.close();
  }
}

/** The time `--since` names; a value that is not a duration is refused with exit code 2. */
function sinceOf(value: string): Date {
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new CliError(
      `--since: "${value}" is not a duration; give a number and a unit, like 30s, 5m, 2h or 1d`,
      2,
    );
  }
  return new Date(Date.now() - ms);
}

const storedSince = (event: TroupeEvent, since: Date | undefined) =>
  since === undefined || Date.parse(event.ts) >= since.getTime();

/** `completed`, `failed (budget_exceeded)`, `cancelled`: from the final event, else the record. */
function outcomeOf(record: WorkflowRecord | undefined, final: TroupeEvent | undefined): string {
  const ending = (final && endingOf(final)) ?? (record && endingOfRecord(record));
  return ending ? describeEnding(ending) : 'ended';
}

/**
 * The first SIGINT or SIGTERM, as an abort signal and a promise (of nothing). The handlers stay to the end of the
 * process: a Ctrl-C while tail is finishing on its own (its task ended) must not kill it with an odd exit code.
 */
function interruption(): { signal: AbortSignal; received: Promise<undefined> } {
  const controller = new AbortController();
  const abort = () => controller.abort();
  process.on('SIGINT', abort);
  process.on('SIGTERM', abort);
  const received = new Promise<undefined>((resolve) =>
    controller.signal.addEventListener('abort', () => resolve(undefined), { once: true }),
  );
  return { signal: controller.signal, received };
}
