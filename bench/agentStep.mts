/**
 * The agent's own CPU per step, without NATS: `runAgentStep` of the core workload's planner (one model call) and
 * executor (a model call, a real write_file, a model call) on the zero-latency scripted model, with an in-memory
 * journal and events made but not sent. What a step costs the process besides its round trips.
 *
 *   node scripts/bench.mjs agentStep [steps=3000]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtinTools } from '@troupe/coordinator';
import { Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest } from '@troupe/protocol';
import { EventFactory, JournalEntry, runAgentStep, StepJournal, systemClock } from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';

const steps = Number(process.argv[2] ?? 3_000);
const root = await mkdtemp(join(tmpdir(), 'troupe-bench-step-'));
const registry = builtinTools();
const script = Script.parse({
  agents: {
    planner: [{ content: '1. write out.txt' }],
    executor: [
      { toolCalls: [{ name: 'write_file', arguments: { path: 'out.txt', content: 'done' } }] },
      { content: 'Wrote out.txt.' },
    ],
  },
});
const agent = (name: string, tools: string[]) => ({
  name,
  instructions: 'Do it.',
  model: new ScriptedProvider(script),
  tools,
  rules: [{ tool: 'write_file', decision: 'allow' as const, paths: ['*.txt'] }],
  maxTurns: 4,
});
const request = (taskId: string, step: string, name: string): AgentStepRequest => ({
  stepId: `${taskId}.${step}.1`,
  taskId,
  pipeline: 'core',
  agent: name,
  step,
  round: 1,
  goal: 'write out.txt',
  context: [],
  expect: 'text',
  priorModelCalls: 0,
});
const deps = {
  registry,
  workspaceRoot: root,
  clock: systemClock,
  events: new EventFactory(),
  publish: () => {},
  journal: new StepJournal(new MemoryKv(JournalEntry)),
};
const print = (figure: string, value: number, unit: string) =>
  console.log(JSON.stringify({ bench: 'agentStep', figure, value: Math.round(value * 1000) / 1000, unit }));

for (const [name, step, tools] of [
  ['planner', 'plan', []],
  ['executor', 'execute', ['write_file']],
] as const) {
  const definition = agent(name, [...tools]);
  for (let i = 0; i < 200; i++) await runAgentStep(definition, request(`warm-${i}`, step, name), deps);
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < steps; i++) {
    const reply = await runAgentStep(definition, request(`t-${i}`, step, name), deps);
    if (!reply.ok) throw new Error(`${name} failed: ${reply.error.message}`);
  }
  const { user, system } = process.cpuUsage(cpu);
  print(`${name} step, wall`, (performance.now() - started) / steps, 'ms');
  print(`${name} step, CPU`, (user + system) / 1000 / steps, 'ms');
}
await rm(root, { recursive: true, force: true });
