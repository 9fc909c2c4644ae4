import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { createLogger, NatsBus } from '@troupe/runtime';
import type { Harness } from './harness.ts';

/**
 * A coordinator of the test's own beside the harness's, on its server, running the pipeline in `file`: one a test
 * can stop mid-task, for another to resume. Resolves with the function that stops it.
 */
export async function startExtraCoordinator(
  h: Harness,
  file: string,
  name: string,
  env: Record<string, string> = {},
): Promise<() => Promise<void>> {
  const logger = createLogger({ level: 'silent' });
  const bus = await NatsBus.connect({ servers: h.nats.url, name, logger });
  const registry = builtinTools();
  const pipeline = await loadPipeline(file, { toolNames: registry.names(), env });
  const coordinator = await startCoordinator({
    bus,
    pipelines: [pipeline],
    logger,
    workspaceRoot: h.workspaceRoot,
    registry,
    noResponderWaitMs: 5_000,
  });
  return async () => {
    await coordinator.stop();
    await bus.close();
  };
}
