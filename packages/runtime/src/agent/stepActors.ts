import { type Actor, type ActorRefFrom, assign, createActor, enqueueActions, setup, stopChild } from 'xstate';
import type { Clock } from '../events/clock.ts';
import { type AgentActorInput, type AgentOutput, agentMachine } from './agentMachine.ts';

/** A step's agent actor, a child of its host's actor. */
export type AgentActorRef = ActorRefFrom<typeof agentMachine>;

/** A step's agent actor as spawned, with its end: its output, or undefined when it was stopped before its end. */
export interface SpawnedAgent {
  agent: AgentActorRef;
  /** Rejects when the actor ends in error (an action that threw). */
  output: Promise<AgentOutput | undefined>;
}

/** A step whose actor was let go while it waits (parked): told when the host actor stops, as a running actor is. */
export interface ParkedStep {
  hostStopped(): void;
}

/** Asks the host actor to spawn a step's agent actor; `spawned` gets it before it starts, to listen to it. */
interface SpawnStep {
  type: 'step.spawn';
  id: string;
  input: AgentActorInput;
  spawned(agent: AgentActorRef): void;
}

/** Stops a step's actor nobody listens to (see {@link StepActors.spawn}). */
interface DropStep {
  type: 'step.drop';
  id: string;
}

/** A child's end, as XState tells its parent: `xstate.done.actor.<id>` or `xstate.error.actor.<id>`. */
interface ChildEnded {
  type: `xstate.done.actor.${string}` | `xstate.error.actor.${string}`;
  actorId: string;
}

/**
 * A group of steps' agent actors, each its child. A child that ends, done or in error, is stopped and dropped from the
 * children at once. Its error is handled here, not left to XState, which would otherwise error the group and the host
 * actor above it, and with them every other step: the step's own reply reports it (see `startAgentStep`).
 */
export const stepGroupMachine = setup({
  types: { events: {} as SpawnStep | DropStep | ChildEnded },
  actors: { agent: agentMachine },
}).createMachine({
  id: 'stepGroup',
  on: {
    'step.spawn': {
      actions: assign(({ event, spawn }) => {
        // `spawn` (not `spawnChild`) hands the actor back before it starts: its first emitted events are heard.
        event.spawned(spawn('agent', { id: event.id, input: event.input }));
        return {};
      }),
    },
    'step.drop': { actions: stopChild(({ event }) => event.id) },
    'xstate.done.actor.*': { actions: stopChild(({ event }) => event.actorId) },
    'xstate.error.actor.*': { actions: stopChild(({ event }) => event.actorId) },
  },
});

type StepGroupRef = ActorRefFrom<typeof stepGroupMachine>;

/**
 * How many groups the host's steps are spread over. XState copies an actor's children (an object) on each spawn and
 * stop, so one parent of every step would spend time growing with the steps in flight on each: 1.8 ms a step with
 * 1,000 in flight, against 0.1 ms for a root actor per step; 0.2 ms with 64 groups. What is left is the shared
 * scheduler's: stopping an actor scans every delayed event of the system for its own (each step's time limit is one).
 */
export const STEP_GROUPS = 64;

/**
 * The host's one root actor, with {@link STEP_GROUPS} groups as its children and each step's agent actor a child of
 * one of them (by its id), so a host keeps one actor system (its registry, scheduler and clock) for its lifetime
 * rather than one per step.
 */
export const agentHostMachine = setup({ actors: { group: stepGroupMachine } }).createMachine({
  id: 'agentHost',
  entry: enqueueActions(({ enqueue }) => {
    for (let group = 0; group < STEP_GROUPS; group++) enqueue.spawnChild('group', { id: `group-${group}` });
  }),
});

/** A step id's group: the same for every run of the step, so a second actor under its id is found. */
export function groupOf(id: string): number {
  // FNV-1a: cheap and spreads ids that differ in a digit or two.
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) hash = Math.imul(hash ^ id.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % STEP_GROUPS;
}

/** A group's lowest child id not in use: a child keeps its slot until the group has stopped it. */
function freeSlot(group: StepGroupRef): string {
  const children = group.getSnapshot().children;
  for (let slot = 0; ; slot++) if (!Object.hasOwn(children, `s${slot}`)) return `s${slot}`;
}

/** Spawns steps' agent actors under one host actor, which runs from its making until {@link stop}. */
export class StepActors {
  readonly #host: Actor<typeof agentHostMachine>;
  readonly #groups: StepGroupRef[];
  /** The agent actor of each step running here, by step id. */
  readonly #running = new Map<string, AgentActorRef>();
  /** The steps parked here, whose actors were dropped: told of the host's stop. */
  readonly #parked = new Set<ParkedStep>();
  #waitingOnModel = 0;

  constructor(clock: Clock) {
    this.#host = createActor(agentHostMachine, { clock });
    this.#host.start();
    this.#groups = Object.values(this.#host.getSnapshot().children) as StepGroupRef[];
  }

  /** The host actor has stopped: no step's actor is spawned any more. */
  get stopped(): boolean {
    return this.#host.getSnapshot().status !== 'active';
  }

  /** Steps' agent actors running now. */
  get size(): number {
    let size = 0;
    for (const group of this.#groups) size += Object.keys(group.getSnapshot().children).length;
    return size;
  }

  /**
   * Steps of this host awake (their actors running) while their model call waits: the crowd `AgentRun` parks sooner
   * when it is over `CROWD`.
   */
  get waitingOnModel(): number {
    return this.#waitingOnModel;
  }

  /** An awake step's model call went out (or a woken step's still waits): it is one of the crowd. */
  modelWaitStarted(): void {
    this.#waitingOnModel++;
  }

  /** An awake step no longer waits on its model (its call ended, it was parked, or it ended). */
  modelWaitEnded(): void {
    this.#waitingOnModel = Math.max(0, this.#waitingOnModel - 1);
  }

  /**
   * Spawns the agent actor of step `id` (unique among the steps running here); `listen` attaches to it before it
   * starts. Its end is heard through one subscription, which also tells this host the step no longer runs here.
   * Throws when the host actor has stopped, or when `listen` threw (the actor, unheard, is then stopped at once).
   *
   * Its actor id is a slot of its group (`s<n>`, the lowest free), not the step's id: XState memoises a machine's
   * transitions by event type, and a child's end is an event named after its id (`xstate.done.actor.<id>`), so a new
   * id a step would grow the shared group machine's memo by one entry a step, for the life of the process. Slots keep
   * that to the most steps a group has held at once. A slot is also never a name a plain object inherits
   * (`__proto__`, `constructor`), where XState keeps its children.
   */
  spawn(id: string, input: AgentActorInput, listen: (agent: AgentActorRef) => void): SpawnedAgent {
    const group = this.#groups[groupOf(id)];
    if (this.#host.getSnapshot().status !== 'active' || !group) throw new Error('the agent host has stopped');
    // Two runs of one step here at once would be told apart by nobody: its reply and its journal are the step's.
    if (this.#running.has(id)) throw new Error(`step ${id} has an agent actor running here already`);
    const child = freeSlot(group);
    let spawnedAgent: SpawnedAgent | undefined;
    let failed: { error: unknown } | undefined;
    let abandoned = false;
    group.send({
      type: 'step.spawn',
      id: child,
      input,
      spawned: (spawned) => {
        // Spawned after this call gave up on it (see below): nobody listens, and it is dropped next.
        if (abandoned) return;
        this.#running.set(id, spawned);
        spawnedAgent = { agent: spawned, output: this.#end(id, spawned) };
        // Thrown here, it would error the group (an action that throws does): it is the step's failure only.
        try {
          listen(spawned);
        } catch (error) {
          failed = { error };
        }
      },
    });
    if (failed) {
      group.send({ type: 'step.drop', id: child });
      throw failed.error;
    }
    // A group handles a spawn at once unless it is mid-transition: a step started from there (by an event heard at once
    // as another step of the group starts) would be spawned right after, unheard, and run beside its failed reply;
    // it is dropped right after its start, before it asks its model, and the step fails (agent_crashed).
    if (!spawnedAgent) {
      abandoned = true;
      group.send({ type: 'step.drop', id: child });
      throw new Error(
        `the agent actor of step ${id} was not spawned: it was started from inside its group's own transition (from an event of another step, heard at once); send it again`,
      );
    }
    return spawnedAgent;
  }

  /**
   * Stops step `id`'s agent actor, if it runs here: its end is heard as a stop's (no output), and the step no longer
   * runs here (a parked step's, which a new actor takes up when it wakes).
   */
  drop(id: string): void {
    const agent = this.#running.get(id);
    if (!agent) return;
    this.#groups[groupOf(id)]?.send({ type: 'step.drop', id: agent.id });
  }

  /**
   * Drops step `id`'s agent actor (see {@link drop}) as its step is parked: `step` is told if the host stops before
   * it is {@link woken}.
   */
  park(id: string, step: ParkedStep): void {
    this.drop(id);
    this.#parked.add(step);
  }

  /** A parked step is taken up again (or has ended): the host's stop is no longer its to hear. */
  woken(step: ParkedStep): void {
    this.#parked.delete(step);
  }

  /** Stops the host actor and with it every agent actor still running, then tells the steps parked here. */
  stop(): void {
    this.#host.stop();
    const parked = [...this.#parked];
    this.#parked.clear();
    for (const step of parked) step.hostStopped();
  }

  /**
   * The end of step `id`'s agent actor, heard through its one subscription (made here, apart from `spawn`, so what it
   * keeps while the step runs is the actor and its id). Done, errored or stopped, an actor completes its observers
   * once: its step no longer runs here.
   */
  #end(id: string, agent: AgentActorRef): Promise<AgentOutput | undefined> {
    const ended = () => {
      if (this.#running.get(id) === agent) this.#running.delete(id);
    };
    return new Promise((resolve, reject) =>
      agent.subscribe({
        complete: () => {
          ended();
          resolve(agent.getSnapshot().output);
        },
        error: (error) => {
          ended();
          reject(error);
        },
      }),
    );
  }
}
