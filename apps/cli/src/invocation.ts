import cli from '../package.json' with { type: 'json' };

/**
 * How a person runs this CLI again from their shell: `troupe` once it is installed (`npm install -g`), or the same
 * `npx` command that is running it now, since under npx `troupe` is on PATH only for npx's own child.
 */
export function troupeCommand(env: NodeJS.ProcessEnv = process.env): string {
  if (env.npm_command !== 'exec' || env.npm_lifecycle_event !== 'npx') return 'troupe';
  const from = env.npm_config_package;
  // `npx --package <tarball or spec> troupe …`; a plain `npx @troupe/cli …` leaves npm_config_package unset.
  return from === undefined || from === '' ? `npx ${cli.name}` : `npx --package ${shellWord(from)} troupe`;
}

/** A word the shell passes on as it is: quoted when it holds anything but safe characters. */
function shellWord(text: string): string {
  return /^[\w@%+=:,./~-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}
