/**
 * The agent host's side of a parked task alone: an agent host on the in-memory bus with N steps in flight whose model
 * never answers (each with heartbeats and a timeout, as a workflow sends them), heap snapshots with 20 and with N more
 * in flight, for bench/heapSnapshotDiff.mjs. Prints the heap per step in flight. What the agent host keeps of a step:
 * its run, requesters and liveness, the agent actor and its model call, the step's services and span.
 *
 *   node scripts/bench.mjs parkedSteps [N=1000] [outDir=.] [snap|nosnap]
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import type { ModelProvider, ModelResponse } from '@troupe/llm';
import { type AgentStepRequest, subjects } from '@troupe/protocol';
import { createLogger, startAgentHost, ToolRegistry } from '@troupe/runtime';
import { MemoryBus } from '@troupe/testkit';

const parked = Number(process.argv[2] ?? 1000);
const outDir = process.argv[3] ?? '.';
const snap = process.argv[4] !== 'nosnap';
const heapUsed = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};
let asked = 0;
const model: ModelProvider = {
  provider: 'parked',
  model: 'parked-1',
  complete: () => {
    asked += 1;
    return new Promise<ModelResponse>(() => {});
  },
};
const bus = new MemoryBus();
const host = startAgentHost({
  bus,
  pipeline: 'parked',
  agents: [{ name: 'writer', instructions: 'Write.', model, tools: [], rules: [], maxTurns: 3 }],
  registry: new ToolRegistry(),
  workspaceRoot: await mkdtemp(join(tmpdir(), 'troupe-bench-steps-')),
  logger: createLogger({ level: 'silent' }),
});
const send = (i: number) => {
  const request: AgentStepRequest = {
    stepId: `task-${i}.write.1`,
    taskId: `task-${i}`,
    pipeline: 'parked',
    agent: 'writer',
    step: 'write',
    round: 1,
    goal: 'write out.txt',
    context: [],
    expect: 'text',
    heartbeatMs: 5_000,
    timeoutMs: 600_000,
  };
  bus.requestReplies(subjects.agent('parked', 'writer'), request, () => {});
};
const until = async (n: number) => {
  while (asked < n) await new Promise((resolve) => setTimeout(resolve, 10));
};
for (let i = 0; i < 20; i++) send(i);
await until(20);
const before = heapUsed();
if (snap) writeHeapSnapshot(join(outDir, 'before.heapsnapshot'));
for (let i = 20; i < parked + 20; i++) send(i);
await until(parked + 20);
const after = heapUsed();
console.log(JSON.stringify({ parked, inFlight: host.inFlight, perStepKB: (after - before) / parked / 1024 }));
if (snap) writeHeapSnapshot(join(outDir, 'after.heapsnapshot'));
process.exit(0);
