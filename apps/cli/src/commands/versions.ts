import { OperationError } from '@troupe/client';
import { shortVersion, useVersion } from '@troupe/coordinator';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';

/**
 * `troupe versions use`: makes a stored version of a pipeline the one new tasks start on, whatever coordinators of
 * older versions do when they restart; tasks already running stay on their own.
 */
export async function use(pipeline: string, version: string, options: ServerOptions): Promise<number> {
  const prefix = version.trim().toLowerCase();
  if (!/^[0-9a-f]{4,64}$/.test(prefix)) {
    throw new CliError(`"${version}" is not a version hash, nor a prefix of one of at least 4 hex digits`, 2);
  }
  const bus = await connectCli(options, 'troupe-versions');
  try {
    const chosen = await useVersion(bus, pipeline, prefix).catch((error) => {
      if (OperationError.is(error, 'no_coordinator'))
        throw new CliError(`${error.message} — start one with troupe up`);
      return explain(error);
    });
    const from = chosen.from === undefined ? '' : ` (was ${shortVersion(chosen.from)})`;
    process.stdout.write(`${pipeline}: new tasks start on version ${shortVersion(chosen.to)}${from}\n`);
    return 0;
  } finally {
    await bus.close();
  }
}
