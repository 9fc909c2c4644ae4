import { parseSubject, subjects } from '@troupe/protocol';
import { type Bus, type BusSubscription, logRefusedMessage } from '@troupe/runtime';
import { suggestion } from '../config/didYouMean.ts';

/**
 * Watches every task subject and reports tasks no coordinator can run: a subject that is not
 * `troupe.tasks.<pipeline>`, or a pipeline no coordinator has loaded. One member of the queue group reports each.
 * (Payload errors for known pipelines are reported by the pipeline's runner, which reads the stored message.) A
 * task the guard lets through is logged by the runner that gets it; the guard's own line for it is at `debug`.
 */
export function startIntakeGuard(
  bus: Bus,
  local: ReadonlySet<string>,
  knownPipelines: () => Promise<string[]>,
): BusSubscription {
  return bus.subscribeText(
    subjects.allTasks,
    async (delivery) => {
      const parsed = parseSubject(delivery.subject);
      // This coordinator's own pipelines need no lookup: their runners read the tasks.
      if (parsed?.type === 'task' && local.has(parsed.pipeline)) return;
      const known = await knownPipelines();
      if (parsed?.type === 'task' && known.includes(parsed.pipeline)) return;
      const name = delivery.subject.slice('troupe.tasks.'.length);
      const reason =
        parsed?.type === 'task'
          ? `no pipeline named "${parsed.pipeline}" is loaded${suggestion(parsed.pipeline, known)}; loaded: ${known.join(', ') || 'none'}`
          : `"${name}" is not a pipeline name (a-z, 0-9 and "-"); publish tasks on troupe.tasks.<pipeline>`;
      logRefusedMessage(bus.logger, delivery.subject, reason, {
        meta: { from: 'user', ...(parsed?.type === 'task' ? { to: parsed.pipeline } : {}), kind: 'task' },
        message: `task on ${delivery.subject} refused: ${reason}`,
      });
      bus.reportInvalid({
        subject: delivery.subject,
        reporter: 'coordinator',
        reason: `task refused: ${reason}`,
        issues: [],
        payload: delivery.value.slice(0, 2_000),
        ...(parsed?.type === 'task' ? { pipeline: parsed.pipeline } : {}),
      });
      delivery.respond({ ok: false, error: { code: 'unknown_pipeline', message: reason } });
    },
    {
      queue: 'troupe-intake-guard',
      reporter: 'coordinator',
      meta: () => ({ from: 'user', kind: 'task' }),
      messageLogLevel: 'debug',
    },
  );
}
