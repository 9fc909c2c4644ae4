import { describe, expect, it } from 'vitest';
import { fixturePath, repoRoot } from './support/harness.ts';
import { runKillSoak } from './support/killSoak.ts';
import { seededRandom } from './support/seed.ts';

/**
 * The short run of the kill -9 soak (`npm run bench:soak` runs 1,000 tasks): 2 `troupe up` and 2 `troupe worker`
 * processes, one of them killed with SIGKILL every second and restarted, while 40 tasks whose every step appends a
 * line to its task's ledger are submitted.
 */
describe('a coordinator or worker killed -9 every second', () => {
  it('ends every task exactly once with the right output, and runs no side effect twice', async () => {
    const { seed, random } = seededRandom('kill soak');
    const report = await runKillSoak({
      root: repoRoot,
      pipelineFile: fixturePath('soak.yaml'),
      tasks: 40,
      submitMs: 10_000,
      killEveryMs: 1_000,
      killAfterSubmitMs: 3_000,
      minKills: 10,
      maxDeliver: 100,
      stallMs: 60_000,
      drainMs: 120_000,
      seed,
      random,
      log: () => {},
    });
    console.info(
      `kill soak: ${report.tasks} tasks, ${report.kills} kills (${report.killsDuringStartUp} before its ready line), ` +
        `${report.restarts} restarts, ${report.endedDuringKills} ended while the kills ran, in doubt ${report.inDoubtRan} ` +
        `ran / ${report.inDoubtNotRun} not run, ${(report.runMs / 1000).toFixed(1)} s${report.kept ? `; kept ${report.kept}` : ''}`,
    );
    expect(report.failures).toEqual([]);
    expect(report.completed).toBe(40);
    // The kills did happen, all the while the tasks were submitted.
    expect(report.kills).toBeGreaterThanOrEqual(10);
  }, 200_000);
});
