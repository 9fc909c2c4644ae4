/**
 * The agent host's side of a parked task alone: an agent host on the in-memory bus with N steps in flight whose model
 * never answers (each with heartbeats and a timeout, as a workflow sends them), heap snapshots with 20 and with N more
 * in flight, each taken once every step's requester has heard it waits on its model (parked, as a workflow sees it),
 * for bench/heapSnapshotDiff.mjs. Prints the heap per step in flight. What the agent host keeps of a step:
 * its run, requesters and liveness, the agent actor and its model call, the step's services and span.
 *
 * By default each step comes as a request on the bus with an inbox, as over NATS (its heartbeats go out; the figure
 * includes the bus's listener for the requester's inbox, about 0.25 KB). With `local` each is taken in this process
 * (`AgentHost.local`, as a coordinator beside the host takes it, which is what `parkedHeap` measures): no inbox and no
 * heartbeats. The bus keeps no history of what it carried (the testkit's does, for tests' assertions).
 *
 * Steps whose model call waits past the host's `parkAfterMs` are parked (their agent actors stopped, see `AgentRun`):
 * `park=<ms>` sets it (default 200, the host's 5 s shortened so the bench runs quickly; `park=0` parks none), and each
 * snapshot is taken that long and half a second more after its steps were heard waiting on their model.
 *
 *   node scripts/bench.mjs parkedSteps [N=1000] [outDir=.] [snap|nosnap] [local] [park=<ms>]
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import type { ModelProvider, ModelResponse } from '@troupe/llm';
import { type AgentStepRequest, StepHeartbeat, subjects } from '@troupe/protocol';
import { createLogger, type LocalStepCall, MemoryBus, startAgentHost, ToolRegistry } from '@troupe/runtime';

const parked = Number(process.argv[2] ?? 1000);
const outDir = process.argv[3] ?? '.';
const snap = process.argv[4] !== 'nosnap';
const local = process.argv[5] === 'local';
const parkArg = process.argv.find((arg) => arg.startsWith('park='));
const parkAfterMs = parkArg === undefined ? 200 : Number(parkArg.slice('park='.length));
const heapUsed = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};
/**
 * Each call's answer, held as a model client holds its request in flight: without it nothing would hold the call's
 * promise, and the step's frames awaiting it (the journaled model's) could be collected as they are not in life.
 */
const answers: ((response: ModelResponse) => void)[] = [];
const model: ModelProvider = {
  provider: 'parked',
  model: 'parked-1',
  complete: () => new Promise<ModelResponse>((resolve) => answers.push(resolve)),
};
/** Steps whose requester heard that they wait on their model: parked, as the workflow sees them. */
const parkedSteps = new Set<string>();
const heard = (heartbeat: StepHeartbeat) => {
  if (heartbeat.waitingOnModel) parkedSteps.add(heartbeat.stepId);
};
const bus = new MemoryBus();
const host = startAgentHost({
  bus,
  pipeline: 'parked',
  agents: [{ name: 'writer', instructions: 'Write.', model, tools: [], rules: [], maxTurns: 3 }],
  registry: new ToolRegistry(),
  workspaceRoot: await mkdtemp(join(tmpdir(), 'troupe-bench-steps-')),
  logger: createLogger({ level: 'silent' }),
  maxLocalSteps: local ? parked + 20 : 0,
  parkAfterMs,
});
/** The steps taken in this process, kept as their workflow would keep them. */
const calls: LocalStepCall[] = [];
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
  if (!local) {
    bus.requestReplies(subjects.agent('parked', 'writer'), request, (reply) => {
      if (!reply.ok) return;
      const heartbeat = StepHeartbeat.safeParse(JSON.parse(new TextDecoder().decode(reply.data)));
      if (heartbeat.success) heard(heartbeat.data);
    });
    return;
  }
  const call = host.local.tryTake(request, { onActivity: heard });
  if (!call) throw new Error(`step ${request.stepId} was not taken in this process`);
  calls.push(call);
};
const until = async (n: number) => {
  while (parkedSteps.size < n) await new Promise((resolve) => setTimeout(resolve, 10));
  // The host parks a step's agent actor once its model call has waited parkAfterMs.
  if (parkAfterMs > 0) await new Promise((resolve) => setTimeout(resolve, parkAfterMs + 500));
};
for (let i = 0; i < 20; i++) send(i);
await until(20);
const before = heapUsed();
if (snap) writeHeapSnapshot(join(outDir, 'before.heapsnapshot'));
for (let i = 20; i < parked + 20; i++) send(i);
await until(parked + 20);
const after = heapUsed();
console.log(
  JSON.stringify({
    parked,
    local,
    parkAfterMs,
    inFlight: host.inFlight,
    perStepKB: (after - before) / parked / 1024,
  }),
);
if (snap) writeHeapSnapshot(join(outDir, 'after.heapsnapshot'));
process.exit(0);
