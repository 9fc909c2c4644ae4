import { CLIENT_WAIT, OperationError, PipelineRegistry } from '@troupe/client';
import type { JetStreamBus } from '@troupe/runtime';
import { registrationOf } from '../intake/pipelineRegistry.ts';
import { PipelineConfig } from './pipelineSchema.ts';
import { shortVersion } from './pipelineVersion.ts';
import { PipelineVersions } from './pipelineVersions.ts';

/**
 * Makes a stored version of a pipeline the newest, the one new tasks start on (`troupe versions use`), as Temporal's
 * "set current version" does: a rollback, or a return to a version that was the newest before. It stays the newest
 * until another is chosen this way or a coordinator starts with a version stored for the first time after now;
 * restarting coordinators of other versions stored before does not change it. Tasks already running stay on theirs.
 * Answers with the version that was the newest and the one that is now.
 */
export async function useVersion(
  bus: JetStreamBus,
  pipeline: string,
  prefix: string,
  now: Date = new Date(),
): Promise<{ from?: string; to: string }> {
  let versions: PipelineVersions;
  let registry: PipelineRegistry;
  try {
    [versions, registry] = await Promise.all([
      PipelineVersions.open(bus, CLIENT_WAIT),
      PipelineRegistry.open(bus, CLIENT_WAIT),
    ]);
  } catch (error) {
    throw new OperationError(
      'no_coordinator',
      `no Troupe coordinator has run on ${bus.server} yet (${(error as Error).message})`,
      { cause: error },
    );
  }
  const registered = await registry.get(pipeline);
  const hashes = await versions.hashes(pipeline);
  const matching = hashes.filter((hash) => hash.startsWith(prefix));
  const hash = matching[0];
  if (matching.length !== 1 || hash === undefined) {
    throw new OperationError(
      'not_found',
      `${matching.length === 0 ? 'no' : 'more than one'} stored version of pipeline ${pipeline} starts with ${prefix}; stored: ${hashes.map(shortVersion).join(', ') || 'none'}`,
    );
  }
  const version = await versions.get(pipeline, hash);
  if (version === undefined) {
    throw new OperationError(
      'not_found',
      `version ${shortVersion(hash)} of pipeline ${pipeline} was removed just now`,
    );
  }
  // Introduced now: coordinators of the versions stored before, restarting, leave it the newest.
  await versions.introduce(version, now);
  await registry.register(
    registrationOf(
      PipelineConfig.parse(version.config),
      registered?.host ?? 'troupe versions use',
      now,
      hash,
    ),
  );
  return { ...(registered?.version === undefined ? {} : { from: registered.version }), to: hash };
}
