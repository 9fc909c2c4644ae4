// p50/p99/mean and CPU per task of `runTask` (troupe run's in-process path) on examples/demo.yaml, scripted models,
// offline: the calls share one in-memory stack (bus, agent host, runner, compiled flow), as a loop of runTask calls of
// one pipeline does; each runs the demo's 5 steps (a rejected round).
// Run: node scripts/bench.mjs apps/coordinator/bench/inProcessRun.mts [count=200] [pipeline.yaml=examples/demo.yaml]
// (bench/fixtures/core.yaml: the 3-step task bench/core.mts measures under troupe up.)
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { builtinTools } from '../src/config/builtinTools.ts';
import { loadPipeline } from '../src/config/loadPipeline.ts';
import { runTask } from '../src/inProcessRun.ts';

const count = Number(process.argv[2] ?? 200);
const file = process.argv[3] ?? join(import.meta.dirname, '..', '..', '..', 'examples', 'demo.yaml');
const pipeline = await loadPipeline(file, { toolNames: builtinTools().names() });
const root = await mkdtemp(join(tmpdir(), 'troupe-inproc-bench-'));
try {
  const run = async (i: number) => {
    const started = performance.now();
    const { final } = await runTask({
      pipeline,
      goal: 'Write a hello note',
      taskId: `b-${i}`,
      workspaceRoot: root,
    });
    if (final.kind !== 'task.completed') throw new Error(`task b-${i} ended ${final.kind}`);
    return performance.now() - started;
  };
  // Warm-up: the first calls pay for JIT and module loading.
  for (let i = 0; i < 20; i++) await run(-i - 1);
  const times: number[] = [];
  const cpu = process.cpuUsage();
  for (let i = 0; i < count; i++) times.push(await run(i));
  const used = process.cpuUsage(cpu);
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))] ?? Number.NaN;
  console.log(
    JSON.stringify({
      pipeline: pipeline.config.name,
      runs: count,
      p50Ms: +at(0.5).toFixed(2),
      p99Ms: +at(0.99).toFixed(2),
      meanMs: +(times.reduce((sum, t) => sum + t, 0) / times.length).toFixed(2),
      cpuMsPerTask: +((used.user + used.system) / 1000 / count).toFixed(2),
    }),
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
