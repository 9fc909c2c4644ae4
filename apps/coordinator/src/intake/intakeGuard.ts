import { parseSubject, subjects } from '@troupe/protocol';
import { type Bus, type BusSubscription, logRefusedMessage } from '@troupe/runtime';
import { suggestion } from '../config/didYouMean.ts';

/**
 * Watches every task subject and reports tasks no coordinator runs now: a subject that is not
 * `troupe.tasks.<pipeline>` (refused: it can never run), or a pipeline no coordinator has loaded (kept in `TASKS`:
 * it runs once a coordinator serves that pipeline, since a pipeline's consumer starts at the stream's first task).
 * One member of the queue group reports each. (Payload errors for known pipelines are reported by the pipeline's
 * runner, which reads the stored message.) A task the guard lets through is logged by the runner that gets it; the
 * guard's own line for it is at `debug`.
 *
 * It needs no stream, so a coordinator starts it before it creates `TASKS`: from the moment the stream exists,
 * every task stored in it is either run or reported.
 */
export function startIntakeGuard(
  bus: Bus,
  local: ReadonlySet<string>,
  knownPipelines: () => Promise<string[]>,
): BusSubscription {
  let toldUnsure = false;
  return bus.subscribeText(
    subjects.allTasks,
    async (delivery) => {
      const parsed = parseSubject(delivery.subject);
      // This coordinator's own pipelines need no lookup: their runners read the tasks.
      if (parsed?.type === 'task' && local.has(parsed.pipeline)) return;
      let known: string[];
      try {
        known = await knownPipelines();
      } catch (error) {
        // Not reported, but not lost either: a task stored on a pipeline's subject runs once that pipeline is served.
        // Said once at `warn`, so a flood of tasks while JetStream starts is not a flood of lines.
        const level = toldUnsure ? 'debug' : 'warn';
        toldUnsure = true;
        bus.logger[level](
          { err: error, subject: delivery.subject },
          `cannot tell whether a coordinator serves ${delivery.subject}; the task is not reported (said once)`,
        );
        return;
      }
      if (parsed?.type === 'task' && known.includes(parsed.pipeline)) return;
      const name = delivery.subject.slice('troupe.tasks.'.length);
      const loaded = `loaded: ${known.join(', ') || 'none'}`;
      const reason =
        parsed?.type === 'task'
          ? `no pipeline named "${parsed.pipeline}" is loaded${suggestion(parsed.pipeline, known)}; ${loaded}; the task is kept and runs once a coordinator serves "${parsed.pipeline}"`
          : `"${name}" is not a pipeline name (a-z, 0-9 and "-"); publish tasks on troupe.tasks.<pipeline>`;
      logRefusedMessage(bus.logger, delivery.subject, reason, {
        meta: { from: 'user', ...(parsed?.type === 'task' ? { to: parsed.pipeline } : {}), kind: 'task' },
        message: `task on ${delivery.subject} ${parsed?.type === 'task' ? 'not run now' : 'refused'}: ${reason}`,
      });
      bus.reportInvalid({
        subject: delivery.subject,
        reporter: 'coordinator',
        reason: `task ${parsed?.type === 'task' ? 'not run now' : 'refused'}: ${reason}`,
        issues: [],
        payload: delivery.value.slice(0, 2_000),
        ...(parsed?.type === 'task' ? { pipeline: parsed.pipeline } : {}),
      });
      // A task on a pipeline's subject is stored and will run, so only a subject no pipeline can have is refused.
      if (parsed?.type !== 'task') {
        delivery.respond({ ok: false, error: { code: 'invalid_subject', message: reason } });
      }
    },
    {
      queue: 'troupe-intake-guard',
      reporter: 'coordinator',
      meta: () => ({ from: 'user', kind: 'task' }),
      messageLogLevel: 'debug',
    },
  );
}
