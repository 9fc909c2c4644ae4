import { sep } from 'node:path';
import cli from '../package.json' with { type: 'json' };

/**
 * How a person runs this CLI again from their shell: `troupe` once it is installed (`npm install -g`), or the same
 * `npx` command that is running it now, since under npx `troupe` is on PATH only for npx's own child.
 */
export function troupeCommand(env: NodeJS.ProcessEnv = process.env, script = process.argv[1] ?? ''): string {
  if (env.npm_command !== 'exec' || env.npm_lifecycle_event !== 'npx') return 'troupe';
  const from = env.npm_config_package;
  // `npx --package <tarball or spec> troupe …` sets it; `npx troupe` and `npx @troupe/cli` do not.
  if (from !== undefined && from !== '') return `npx --package ${shellWord(from)} troupe`;
  // npx fetched the package into its cache for `npx @troupe/cli`; `npx troupe` ran a project's own install.
  return script.includes(`${sep}_npx${sep}`) ? `npx ${cli.name}` : 'npx troupe';
}

/** A word the shell passes on as it is: quoted when it holds anything but safe characters. */
function shellWord(text: string): string {
  return /^[\w@%+=:,./~-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}
