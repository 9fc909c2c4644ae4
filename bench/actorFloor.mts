/**
 * What XState itself costs in heap per actor, with nothing of Troupe's in it: N actors of a trivial machine (one
 * state, a one-key context), each alone as a root (its own actor system) and then as a parent invoking one child of
 * each kind a parked task's tree holds (a machine, a callback, a promise). The floor under bench/parkedHeap.mts: a
 * parked task's tree is a root task actor with a callback child, the workflow and its step call (machines), the step
 * call's request (a callback), and on the agent host an agent machine with its model call (a promise).
 *
 *   node scripts/bench.mjs actorFloor [N=5000]
 */
import { type AnyActorRef, createActor, fromCallback, fromPromise, setup } from 'xstate';

const n = Number(process.argv[2] ?? 5000);
const heapUsed = () => {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc (node scripts/bench.mjs does)');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const trivial = setup({}).createMachine({
  id: 'trivial',
  context: { a: 1 },
  initial: 'idle',
  states: { idle: { on: { go: 'done' } }, done: {} },
});
const actors = {
  machine: trivial,
  callback: fromCallback(() => () => {}),
  promise: fromPromise(() => new Promise<never>(() => {})),
};
const parentOf = (child: keyof typeof actors | undefined) =>
  setup({ actors }).createMachine({
    id: 'parent',
    initial: 'run',
    states: { run: child ? { invoke: { src: child, id: 'child' } } : {} },
  });

const kept: AnyActorRef[] = [];
function kbPerActor(start: () => AnyActorRef): number {
  kept.length = 0;
  const before = heapUsed();
  for (let i = 0; i < n; i++) kept.push(start().start());
  const after = heapUsed();
  for (const actor of kept) actor.stop();
  return (after - before) / n / 1024;
}

const root = kbPerActor(() => createActor(trivial));
const alone = kbPerActor(() => createActor(parentOf(undefined)));
const round = (kb: number) => Math.round(kb * 100) / 100;
console.log(JSON.stringify({ figure: 'root machine actor', n, kb: round(root) }));
for (const kind of ['machine', 'callback', 'promise'] as const) {
  const withChild = kbPerActor(() => createActor(parentOf(kind)));
  console.log(JSON.stringify({ figure: `invoked ${kind} child`, n, kb: round(withChild - alone) }));
}
