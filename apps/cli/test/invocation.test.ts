import { describe, expect, it } from 'vitest';
import { troupeCommand } from '../src/invocation.ts';

// What npm puts in the environment of a bin it runs for `npx …` (npm 10 and 11).
const npx = { npm_command: 'exec', npm_lifecycle_event: 'npx' };

describe('troupeCommand', () => {
  it('is troupe for an installed CLI, and under npm run', () => {
    expect(troupeCommand({})).toBe('troupe');
    expect(troupeCommand({ npm_command: 'run-script', npm_lifecycle_event: 'troupe' })).toBe('troupe');
  });

  it('repeats the npx command that runs it, with its --package', () => {
    expect(troupeCommand({ ...npx, npm_config_package: './troupe-cli-0.1.0.tgz' })).toBe(
      'npx --package ./troupe-cli-0.1.0.tgz troupe',
    );
    expect(troupeCommand({ ...npx, npm_config_package: '/tmp/my pack/troupe-cli.tgz' })).toBe(
      "npx --package '/tmp/my pack/troupe-cli.tgz' troupe",
    );
  });

  it('names the published package under a plain npx', () => {
    expect(troupeCommand(npx)).toBe('npx @troupe/cli');
  });
});
