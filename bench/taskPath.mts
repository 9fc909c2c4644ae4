/**
 * The path one task takes through the code, read from V8's precise coverage rather than walked by hand: the core
 * workload (bench/fixtures/core.yaml) runs warm, then coverage counters are reset, one more task runs from its
 * publish on `troupe.tasks.core` to its final event, and every function that ran for it is listed by source file.
 * Issue 31 asks for a task's path through the coordinator to read straight; this gives its breadth (files and
 * functions entered) in a way anyone can repeat on any revision.
 *
 * Run it with tsx, not scripts/bench.mjs: a bundle would fold every source file into one.
 *
 *   npx tsx bench/taskPath.mts [--functions]     --functions lists the functions under each file
 */
import { mkdtemp } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { FINAL_EVENT_KINDS, subjects } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';

const listFunctions = process.argv.includes('--functions');
const repo = join(import.meta.dirname, '..');
const nats = await startTestNats();
const logger = createLogger({ level: 'silent' });
const bus = await NatsBus.connect({ servers: nats.url, name: 'bench-path', logger });
const registry = builtinTools();
const coordinator = await startCoordinator({
  bus,
  pipelines: [
    await loadPipeline(join(import.meta.dirname, 'fixtures', 'core.yaml'), { toolNames: registry.names() }),
  ],
  logger,
  workspaceRoot: await mkdtemp(join(tmpdir(), 'troupe-bench-path-')),
  registry,
});
const client = await connect({ servers: nats.url, name: 'bench-path-client' });
const finals = new Map<string, () => void>();
client.subscribe(subjects.event('core', '*', '>'), {
  callback: (_error, msg) => {
    const [, , , taskId, ...kind] = msg.subject.split('.');
    if (taskId && (FINAL_EVENT_KINDS as readonly string[]).includes(kind.join('.'))) finals.get(taskId)?.();
  },
});
await client.flush();
const run = (id: string) =>
  new Promise<void>((resolve) => {
    finals.set(id, resolve);
    client.publish(subjects.task('core'), JSON.stringify({ id, goal: 'write out.txt' }));
  });

// Warm: every path a task takes exists, and lazily made things are made.
for (let i = 0; i < 5; i++) await run(`warm-${i}`);

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
await session.post('Profiler.takePreciseCoverage'); // resets the counters
await run('measured');
const { result } = await session.post('Profiler.takePreciseCoverage');
await session.post('Profiler.stopPreciseCoverage');
session.disconnect();

/** Functions that ran for the measured task, by the package folder and file they are in. */
const byFile = new Map<string, string[]>();
for (const script of result) {
  const path = script.url.startsWith('file://') ? new URL(script.url).pathname : script.url;
  if (!path.startsWith(repo) || path.includes('/node_modules/')) continue;
  // The module's top level (the range from offset 0) ran at import, not for the task. Arrow functions have no
  // name: they are listed by where they start.
  const ran = script.functions
    .filter((f) => f.ranges[0] !== undefined && f.ranges[0].count > 0 && f.ranges[0].startOffset > 0)
    .map((f) => f.functionName || `(arrow at ${f.ranges[0]?.startOffset})`);
  if (ran.length > 0) byFile.set(relative(repo, path), ran);
}
const area = (file: string) => file.split('/').slice(0, 2).join('/');
const areas = new Map<string, { files: number; functions: number }>();
for (const [file, functions] of byFile) {
  const a = areas.get(area(file)) ?? { files: 0, functions: 0 };
  a.files += 1;
  a.functions += functions.length;
  areas.set(area(file), a);
}
console.log('one task of the core workload, warm: source files and functions it ran, by package');
for (const [name, a] of [...areas].sort((x, y) => y[1].functions - x[1].functions))
  console.log(
    `  ${name.padEnd(22)} ${String(a.files).padStart(4)} files  ${String(a.functions).padStart(5)} functions`,
  );
const coordinatorFiles = [...byFile].filter(([file]) => file.startsWith('apps/coordinator/src/'));
console.log(`\napps/coordinator/src files entered (${coordinatorFiles.length}):`);
for (const [file, functions] of coordinatorFiles.sort((x, y) => y[1].length - x[1].length))
  console.log(
    `  ${String(functions.length).padStart(3)}  ${file}${listFunctions ? `\n         ${functions.join(', ')}` : ''}`,
  );

await coordinator.stop();
await client.close();
await bus.close();
await nats.stop();
