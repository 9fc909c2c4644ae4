/**
 * How fast the `troupe` CLI answers, as a person runs it: CPU of `--help` and `--version`, wall time of the
 * everyday commands against a running `troupe up` (network round trips included), and `troupe up` from start to
 * ready with its embedded nats-server. Runs the installed bin (apps/cli/bin/troupe.mjs), each command 5 times;
 * prints one JSON line per figure (median).
 *
 *   npx tsx bench/cliStartup.mts
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const bin = join(root, 'apps', 'cli', 'bin', 'troupe.mjs');
const demo = join(root, 'examples', 'demo.yaml');
const RUNS = 5;
const time = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;
const { NATS_URL: _unset, ...env } = process.env;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
const print = (figure: string, value: number, unit: string) =>
  console.log(JSON.stringify({ bench: 'cli', figure, value: Math.round(value * 1000) / 1000, unit }));

/** One run: wall seconds, and CPU seconds (user + system) when /usr/bin/time is there. */
function run(args: string[]): { wall: number; cpu: number | undefined; status: number | null; out: string } {
  const started = performance.now();
  const result = time
    ? spawnSync(time, ['-f', 'cpu %U %S', process.execPath, bin, ...args], {
        cwd: root,
        env,
        encoding: 'utf8',
      })
    : spawnSync(process.execPath, [bin, ...args], { cwd: root, env, encoding: 'utf8' });
  const wall = (performance.now() - started) / 1000;
  const match = /cpu ([\d.]+) ([\d.]+)\s*$/.exec(result.stderr);
  const cpu = match ? Number(match[1]) + Number(match[2]) : undefined;
  return { wall, cpu, status: result.status, out: `${result.stdout}${result.stderr}` };
}

function measure(label: string, args: () => string[], what: 'cpu' | 'wall', expectStatus = 0): void {
  const values: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const result = run(args());
    if (result.status !== expectStatus) {
      console.error(`${label}: exit ${result.status}\n${result.out}`);
      return;
    }
    const value = what === 'cpu' ? result.cpu : result.wall;
    if (value !== undefined) values.push(value);
  }
  if (values.length > 0) print(`${label} (${what})`, median(values), 's');
}

measure('troupe --help', () => ['--help'], 'cpu');
measure('troupe --help', () => ['--help'], 'wall');
measure('troupe --version', () => ['--version'], 'cpu');
measure('troupe validate', () => ['validate', demo], 'wall');

const home = await mkdtemp(join(tmpdir(), 'troupe-bench-cli-'));
const started = performance.now();
const up = spawn(process.execPath, [bin, 'up', demo, '--home', home], {
  cwd: root,
  env,
  stdio: ['ignore', 'ignore', 'pipe'],
});
let upOutput = '';
await new Promise<void>((resolve, reject) => {
  up.stderr.on('data', (chunk: Buffer) => {
    upOutput += chunk.toString();
    if (upOutput.includes('troupe is up')) resolve();
  });
  up.on('exit', (code) => reject(new Error(`troupe up exited with ${code}: ${upOutput}`)));
});
print('troupe up ready (embedded nats-server)', (performance.now() - started) / 1000, 's');
try {
  const at = ['--home', home];
  let n = 0;
  measure('troupe submit', () => ['submit', 'demo', 'bench', '--id', `bench-${++n}`, ...at], 'wall');
  measure('troupe status', () => ['status', ...at], 'wall');
  measure('troupe status --all', () => ['status', '--all', ...at], 'wall');
  measure('troupe cancel (task ended)', () => ['cancel', 'bench-1', ...at], 'wall', 1);
  measure('troupe approve (no such approval)', () => ['approve', 'ap-nothing', ...at], 'wall', 1);
  measure('troupe answer (no such question)', () => ['answer', 'q-nothing', 'yes', ...at], 'wall', 1);
} finally {
  up.kill('SIGTERM');
  await new Promise((resolve) => up.on('exit', resolve));
  await rm(home, { recursive: true, force: true });
}
