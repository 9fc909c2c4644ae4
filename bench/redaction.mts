/**
 * What keeping secrets out of events costs: `EventFactory.make` (which redacts every string of an event's data)
 * on the events a task publishes most, with a realistic set of registered secrets, against `redactDeep` alone and
 * against the same events made without it (the data passed through as is).
 *
 *   node scripts/bench.mjs redaction [iterations=200000]
 */
import { EventFactory, redactDeep, registerSecret, systemClock } from '@troupe/runtime';

const iterations = Number(process.argv[2] ?? 200_000);
// A deployment's keys: two providers, a NATS token, a database password, a webhook secret.
for (const secret of [
  `sk-proj-${'a1B2'.repeat(12)}`,
  `sk-ant-api03-${'Zx9y'.repeat(20)}`,
  'nats-token-5f1c9e2a7b',
  'Pg-pass-2026!x',
  'whsec_7e1d0c9b8a',
]) {
  registerSecret(secret);
}

const factory = new EventFactory(systemClock);
const scope = {
  pipeline: 'demo',
  taskId: 't1',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};
const ref = { agent: 'executor', stepId: 't1.execute.1' };
const reply = 'I wrote the note. '.repeat(220); // about the 4,000 characters an event keeps
const samples = {
  'tool.call': () =>
    factory.make('tool.call', scope, {
      ...ref,
      turn: 1,
      index: 0,
      callId: 'call_1',
      tool: 'write_file',
      arguments: '{"path":"notes/hello.md","content":"Hello from Troupe"}',
    }),
  'llm.response (4,000 chars)': () =>
    factory.make('llm.response', scope, {
      ...ref,
      turn: 2,
      provider: 'openai',
      model: 'gpt-5-mini',
      usage: { inputTokens: 900, outputTokens: 120, cachedTokens: 0 },
      costUsd: 0.0004,
      finishReason: 'stop',
      content: reply,
      toolCalls: [],
      durationMs: 850,
    }),
  'step.started': () =>
    factory.make('step.started', scope, {
      step: 'execute',
      agent: 'executor',
      round: 1,
      stepId: 't1.execute.1',
    }),
};

const time = (run: () => unknown): number => {
  for (let i = 0; i < 10_000; i++) run();
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) run();
  return Number(process.hrtime.bigint() - start) / 1_000 / iterations;
};

console.log(`${iterations} iterations each, µs per event`);
console.log('event                        make    redactDeep of its data');
for (const [name, make] of Object.entries(samples)) {
  const data = make().data;
  const made = time(make);
  const redacted = time(() => redactDeep(data));
  console.log(`${name.padEnd(28)} ${made.toFixed(2).padStart(5)}   ${redacted.toFixed(2).padStart(5)}`);
}
