import { BUCKETS, PipelineRegistration } from '@troupe/protocol';
import { type JetStreamBus, KvStore, type Logger } from '@troupe/runtime';
import { shortVersion } from '../config/pipelineVersion.ts';
import type { AgentService } from './agentService.ts';

/**
 * Follows the newest version of each pipeline in the registry, and has `agents` serve the agents it adds: a
 * `troupe worker` started before a pipeline gained an agent (a reload, a deploy of another coordinator) serves that
 * agent's steps without a restart. Each agent is run as the version of its step defines it, read from `versions`.
 * Returns what stops following.
 */
export async function serveNewestAgents(
  bus: JetStreamBus,
  pipelines: readonly string[],
  agents: Pick<AgentService, 'serveVersion'>,
  logger: Logger,
): Promise<() => void> {
  const registry = await KvStore.open(bus, BUCKETS.pipelines, PipelineRegistration);
  const stops: (() => void)[] = [];
  for (const pipeline of pipelines) {
    stops.push(
      await registry.watch(pipeline, ({ value }) => {
        const version = value.version;
        if (version === undefined) return;
        agents
          .serveVersion(pipeline, version)
          .catch((error: unknown) =>
            logger.error(
              { err: error, pipeline, version },
              `cannot serve the agents version ${shortVersion(version)} of pipeline ${pipeline} adds; restart to serve them`,
            ),
          );
      }),
    );
  }
  return () => {
    for (const stop of stops) stop();
  };
}
