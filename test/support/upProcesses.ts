import { type CliProcess, cliEnv, startTroupe } from './cli.ts';

/** The `troupe up` processes of a kill -9 test, all on one server, one pipeline file and one home. */
export interface UpProcesses {
  /** Starts one and resolves once it is up. */
  up(): Promise<CliProcess>;
  /** How many run now. */
  count(): number;
  /** Stops every one running (SIGKILL: as a crash; SIGTERM: a clean stop) and waits for each to end. */
  stopAll(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * `troupe up <file>` on `url`, in `home`: with a 2 s ack wait, so the tasks of one killed are delivered again to the
 * next soon; `args` are added to each command line.
 */
export function upProcesses(
  file: string,
  url: string,
  home: string,
  env = cliEnv(),
  args: readonly string[] = [],
): UpProcesses {
  const running: CliProcess[] = [];
  return {
    async up() {
      const p = startTroupe(['up', file, '--ack-wait', '2', '--server', url, '--home', home, ...args], env);
      running.push(p);
      await p.waitFor(/troupe is up/, 60_000);
      return p;
    },
    count: () => running.length,
    async stopAll(signal = 'SIGKILL') {
      for (const p of running.splice(0)) await p.stop(signal);
    },
  };
}
