import { describe, expect, it } from 'vitest';
import { troupeCommand } from '../src/invocation.ts';

// What npm puts in the environment of a bin it runs for `npx …` (npm 10 and 11).
const npx = { npm_command: 'exec', npm_lifecycle_event: 'npx' };

describe('troupeCommand', () => {
  it('is troupe for an installed CLI, and under npm run', () => {
    expect(troupeCommand({})).toBe('troupe');
    expect(troupeCommand({}, '/usr/local/bin/troupe')).toBe('troupe');
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

  it("names the published package when npx fetched it, and the project's troupe when it ran that", () => {
    expect(troupeCommand(npx, '/home/ada/.npm/_npx/c795ce218a08d2b8/node_modules/.bin/troupe')).toBe(
      'npx @troupe/cli',
    );
    expect(troupeCommand(npx, '/home/ada/project/node_modules/.bin/troupe')).toBe('npx troupe');
  });
});
