/**
 * What XState itself costs in CPU per actor and per call, with nothing of Troupe's in it: the shapes a task's tree
 * runs, each timed alone with `process.cpuUsage` over N runs, twice in turn (the second pair is the figure; the
 * first warms the JIT). The CPU counterpart of bench/actorFloor.mts.
 *
 * - a call a machine makes and waits for, four in a row (as the agent's model calls): invoked as a promise actor
 *   (an actor built, started, its done event, stopped) against started from an entry action whose result the
 *   machine is sent as an event;
 * - an agent-like actor (an eventless chain into a state that invokes a promise, then final) started for a step:
 *   a root of its own (its own actor system), against spawned by a group machine's transition, as the agent host
 *   does (`StepActors`);
 * - a transition with four `assign`s, against one assigning the same four keys at once: XState rebuilds the
 *   snapshot (its state value and tags) on each.
 *
 *   node scripts/bench.mjs actorCpu [N=20000]
 */
import { type AnyActorRef, assign, createActor, fromPromise, setup, stopChild } from 'xstate';

const n = Number(process.argv[2] ?? 20_000);
const work = async (value: number) => value * 2;

/** Runs `start` N times, each to its end, one after the other: µs of CPU per run. */
async function cpuPerRun(start: (i: number) => AnyActorRef): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const actor = start(i);
    await new Promise<void>((resolve) => {
      actor.subscribe({ complete: () => resolve() });
      actor.start();
    });
  }
  const { user, system } = process.cpuUsage(before);
  return (user + system) / n;
}

const CALLS = 4;
const invokedCalls = setup({
  types: { context: {} as { calls: number } },
  actors: { call: fromPromise(async ({ input }: { input: number }) => work(input)) },
}).createMachine({
  id: 'invoked',
  context: { calls: 0 },
  initial: 'calling',
  states: {
    calling: {
      invoke: {
        src: 'call',
        input: ({ context }) => context.calls,
        onDone: [
          {
            guard: ({ context }) => context.calls + 1 < CALLS,
            target: 'calling',
            reenter: true,
            actions: assign({ calls: ({ context }) => context.calls + 1 }),
          },
          { target: 'done' },
        ],
      },
    },
    done: { type: 'final' },
  },
});
const sentCalls = setup({
  types: { context: {} as { calls: number }, events: {} as { type: 'called'; output: number } },
}).createMachine({
  id: 'sent',
  context: { calls: 0 },
  initial: 'calling',
  states: {
    calling: {
      entry: ({ context, self }) => {
        void work(context.calls).then((output) => self.send({ type: 'called', output }));
      },
      on: {
        called: [
          {
            guard: ({ context }) => context.calls + 1 < CALLS,
            target: 'calling',
            reenter: true,
            actions: assign({ calls: ({ context }) => context.calls + 1 }),
          },
          { target: 'done' },
        ],
      },
    },
    done: { type: 'final' },
  },
});

const agentLike = setup({
  types: { context: {} as { n: number; out: number }, input: {} as number },
  actors: { call: fromPromise(async ({ input }: { input: number }) => work(input)) },
}).createMachine({
  id: 'agentLike',
  context: ({ input }) => ({ n: input, out: 0 }),
  initial: 'working',
  states: {
    working: {
      initial: 'starting',
      states: {
        starting: { always: 'deciding' },
        deciding: { always: 'thinking' },
        thinking: {
          entry: assign({ n: ({ context }) => context.n + 1 }),
          invoke: {
            src: 'call',
            input: ({ context }) => context.n,
            onDone: { target: '#agentLike.done', actions: assign({ out: ({ event }) => event.output }) },
          },
        },
      },
    },
    done: { type: 'final' },
  },
});
interface Spawn {
  type: 'spawn';
  input: number;
  spawned: (actor: AnyActorRef) => void;
}
interface ChildDone {
  type: `xstate.done.actor.${string}`;
  actorId: string;
}
const group = setup({
  types: { events: {} as Spawn | ChildDone },
  actors: { agent: agentLike },
}).createMachine({
  on: {
    spawn: {
      actions: assign(({ event, spawn }) => {
        event.spawned(spawn('agent', { id: 's0', input: event.input }));
        return {};
      }),
    },
    'xstate.done.actor.*': { actions: stopChild(({ event }) => event.actorId) },
  },
});

type Four = { a: number; b: number; c: number; d: number };
const fourAssigns = setup({
  types: { context: {} as Four, events: {} as { type: 'go' } },
}).createMachine({
  context: { a: 0, b: 0, c: 0, d: 0 },
  initial: 'idle',
  states: {
    idle: {
      on: {
        go: {
          target: 'done',
          actions: [
            assign({ a: 1 }),
            assign({ b: ({ context }) => context.a + 1 }),
            assign({ c: ({ context }) => context.b + 1 }),
            assign({ d: ({ context }) => context.c + 1 }),
          ],
        },
      },
    },
    done: { type: 'final' },
  },
});
const oneAssign = setup({
  types: { context: {} as Four, events: {} as { type: 'go' } },
}).createMachine({
  context: { a: 0, b: 0, c: 0, d: 0 },
  initial: 'idle',
  states: {
    idle: { on: { go: { target: 'done', actions: assign({ a: 1, b: 2, c: 3, d: 4 }) } } },
    done: { type: 'final' },
  },
});
/** The machine, started, sent `go`: its end. */
const sentGo = (machine: typeof fourAssigns | typeof oneAssign) => () => {
  const actor = createActor(machine);
  queueMicrotask(() => actor.send({ type: 'go' }));
  return actor;
};

const hostGroup = createActor(group).start();
const spawnedInGroup = (i: number): AnyActorRef => {
  let child: AnyActorRef | undefined;
  hostGroup.send({ type: 'spawn', input: i, spawned: (actor) => (child = actor) });
  if (!child) throw new Error('not spawned');
  // Spawned children start with their parent's transition: the caller's start() is a no-op on a running actor.
  return child;
};

const shapes: [string, string, (i: number) => AnyActorRef, number][] = [
  ['a call invoked as a promise actor', 'call', () => createActor(invokedCalls), CALLS],
  ['a call started by an action, its result sent', 'call', () => createActor(sentCalls), CALLS],
  ['an agent-like actor as a root', 'actor', (i) => createActor(agentLike, { input: i }), 1],
  ['an agent-like actor spawned in a group', 'actor', spawnedInGroup, 1],
  ['a transition with four assigns', 'transition', sentGo(fourAssigns), 1],
  ['a transition with one assign of four keys', 'transition', sentGo(oneAssign), 1],
];
const figures = new Map<string, number>();
for (let pass = 0; pass < 2; pass++) {
  for (const [figure, , start, per] of shapes) figures.set(figure, (await cpuPerRun(start)) / per);
}
for (const [figure, unit] of shapes.map(([figure, unit]) => [figure, unit] as const)) {
  const us = Math.round((figures.get(figure) ?? 0) * 10) / 10;
  console.log(JSON.stringify({ bench: 'actorCpu', figure, n, value: us, unit: `µs CPU per ${unit}` }));
}
hostGroup.stop();
