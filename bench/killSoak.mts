/**
 * The kill -9 soak: 2 `troupe up` (each with agents) and 2 `troupe worker` on one nats-server, 1,000 tasks of a
 * three-step pipeline whose every step appends a line to its task's ledger (test/fixtures/soak.yaml), and a kill -9
 * of a coordinator or worker chosen at random every second, each restarted at once. It checks that every task ended
 * exactly once with the right output, that no step's side effect ran twice (ledger lines against the journal's
 * claims), and that no task was left unfinished; it exits 1 on any failure. Needs the built CLI
 * (`node scripts/buildCli.mjs`).
 *
 *   npm run bench:soak -- [--tasks 1000] [--submit-seconds 100] [--kill-every-ms 1000] [--seed N]
 *                         [--kill-after-submit-seconds 30] [--stall-seconds 60]
 *                         [--drain-seconds 1200] [--max-deliver 100 (0: troupe up's default)] [--keep]
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runKillSoak } from '../test/support/killSoak.ts';
import { seededRandom } from '../test/support/seed.ts';

const { values } = parseArgs({
  options: {
    tasks: { type: 'string', default: '1000' },
    'submit-seconds': { type: 'string', default: '100' },
    'kill-every-ms': { type: 'string', default: '1000' },
    'kill-after-submit-seconds': { type: 'string', default: '30' },
    'stall-seconds': { type: 'string', default: '60' },
    'drain-seconds': { type: 'string', default: '1200' },
    'max-deliver': { type: 'string', default: '100' },
    seed: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const number = (name: keyof typeof values): number => {
  const n = Number(values[name]);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`--${name} must be a number ≥ 0, not ${JSON.stringify(values[name])}`);
    process.exit(2);
  }
  return n;
};
const root = join(import.meta.dirname, '..');
const { seed, random } = seededRandom('kill soak', values.seed === undefined ? undefined : number('seed'));
const tasks = number('tasks');
const report = await runKillSoak({
  root,
  pipelineFile: join(root, 'test', 'fixtures', 'soak.yaml'),
  tasks,
  submitMs: number('submit-seconds') * 1000,
  killEveryMs: number('kill-every-ms'),
  killAfterSubmitMs: number('kill-after-submit-seconds') * 1000,
  stallMs: number('stall-seconds') * 1000,
  // 0: the product's default (10).
  ...(number('max-deliver') === 0 ? {} : { maxDeliver: number('max-deliver') }),
  drainMs: number('drain-seconds') * 1000,
  seed,
  random,
  log: (line) => console.log(line),
  keep: values.keep,
});

const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
console.log(`
kill soak, seed ${report.seed} (replay: npm run bench:soak -- --seed ${report.seed}); troupe up --max-deliver ${values['max-deliver'] === '0' ? '(default)' : values['max-deliver']}
  tasks                      ${report.tasks}, completed once with the right output: ${report.completed}
  kills (-9)                 ${report.kills} over ${s(report.killMs)} (${report.killsDuringStartUp} before the process had printed its ready line), restarts ${report.restarts}
  ended while the kills ran  ${report.endedDuringKills}; the rest after, with all four up
  exits nobody caused        ${report.unexpectedExits}
  tool calls in doubt        ${report.inDoubtRan} had run once, ${report.inDoubtNotRun} had not run (neither ran again)
  final events sent again    ${report.finalRepublished} (same id, de-duplicated by EVENTS)
  wall time                  ${s(report.wallMs)}; first submission to last end ${s(report.runMs)}
  tasks/s                    ${report.tasksPerSecond.toFixed(1)}`);
if (report.kept) console.log(`  processes' logs and workspaces kept in ${report.kept}`);
if (report.failures.length > 0) {
  console.log(`\nFAILED: ${report.failures.length} problems`);
  for (const line of report.failures.slice(0, 50)) console.log(`  ${line}`);
  if (report.failures.length > 50) console.log(`  … and ${report.failures.length - 50} more`);
  process.exit(1);
}
console.log('\nOK: no task lost or ended twice, no side effect run twice');
process.exit(0);
