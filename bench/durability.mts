/**
 * What durability costs inside a step: step latency with and without the step journal (KV on a real local
 * nats-server), and how fast a step resumes from its journal compared with running it.
 *
 *   npx tsx bench/durability.mts [steps=200]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest } from '@troupe/protocol';
import {
  type AgentDefinition,
  createLogger,
  defineTool,
  EventFactory,
  ensureTroupeStreams,
  NatsBus,
  runAgentStep,
  type StepDeps,
  StepJournal,
  systemClock,
  ToolRegistry,
} from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';
import { z } from 'zod';

const steps = Number(process.argv[2] ?? 200);
const TURNS = 5;

const note = defineTool({
  name: 'note',
  description: 'Take a note',
  input: z.object({ text: z.string() }),
  run: async ({ text }) => `noted ${text}`,
});
const script = Script.parse({
  agents: {
    clerk: [
      ...Array.from({ length: TURNS - 1 }, (_, i) => ({
        toolCalls: [
          { name: 'note', arguments: { text: `a${i}` } },
          { name: 'note', arguments: { text: `b${i}` } },
        ],
      })),
      { content: 'done' },
    ],
  },
});

const nats = await startTestNats();
const bus = await NatsBus.connect({
  servers: nats.url,
  name: 'bench',
  logger: createLogger({ level: 'silent' }),
});
await ensureTroupeStreams(bus);
const journal = await StepJournal.open(bus);
const root = await mkdtemp(join(tmpdir(), 'troupe-bench-'));
const registry = new ToolRegistry();
registry.register(note);

const agent = (): AgentDefinition => ({
  name: 'clerk',
  instructions: 'Take notes.',
  model: new ScriptedProvider(script),
  tools: ['note'],
  rules: [{ tool: 'note', decision: 'allow' }],
  maxTurns: TURNS + 1,
});
const request = (taskId: string): AgentStepRequest => ({
  stepId: `${taskId}.notes.1`,
  taskId,
  pipeline: 'bench',
  agent: 'clerk',
  step: 'notes',
  round: 1,
  goal: 'take notes',
  context: [],
  expect: 'text',
  priorModelCalls: 0,
});
const deps = (withJournal: boolean): StepDeps => ({
  registry,
  workspaceRoot: root,
  clock: systemClock,
  events: new EventFactory({ now: () => Date.now() }, () => crypto.randomUUID()),
  publish: () => {},
  ...(withJournal ? { journal } : {}),
});

async function measure(label: string, run: (i: number) => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 10; i++) await run(-1 - i); // warm-up
  const times: number[] = [];
  for (let i = 0; i < steps; i++) {
    const started = performance.now();
    await run(i);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  const p = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))] ?? 0;
  console.log(
    `${label.padEnd(36)} mean ${mean.toFixed(2)} ms   p50 ${p(0.5).toFixed(2)} ms   p95 ${p(0.95).toFixed(2)} ms`,
  );
  return times;
}

console.log(
  `${steps} steps of ${TURNS} model turns and ${2 * (TURNS - 1)} tool calls each (scripted model, no-op tool), nats-server on 127.0.0.1`,
);
const ok = (reply: { ok: boolean }) => {
  if (!reply.ok) throw new Error('a step failed');
};
await measure('without journal', async (i) =>
  ok(await runAgentStep(agent(), request(`plain-${i}`), deps(false))),
);
await measure('with journal (first run)', async (i) =>
  ok(await runAgentStep(agent(), request(`journaled-${i}`), deps(true))),
);
// The same steps again in a fresh "process": every turn and call comes from the journal.
await measure('resumed from journal (all recorded)', async (i) =>
  ok(await runAgentStep(agent(), request(`journaled-${i}`), deps(true))),
);
const calls = 2 * (TURNS - 1);
// A turn that follows calls this run claimed new is not looked up: only the first turn is.
console.log(
  `journal traffic per step: 1 reply lookup (the first turn's) and ${TURNS} reply writes, and per tool call a ` +
    `claim and a result (${2 * calls}): ${1 + TURNS + 2 * calls} KV round trips`,
);

await bus.close();
await nats.stop();
await rm(root, { recursive: true, force: true });
