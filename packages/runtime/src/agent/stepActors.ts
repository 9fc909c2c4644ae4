import { type Actor, type ActorRefFrom, assign, createActor, setup, stopChild } from 'xstate';
import type { Clock } from '../events/clock.ts';
import { type AgentMachineInput, agentMachine } from './agentMachine.ts';

/** A step's agent actor, a child of its host's actor. */
export type AgentActorRef = ActorRefFrom<typeof agentMachine>;

/** Asks the host actor to spawn a step's agent actor; `spawned` gets it before it starts, to listen to it. */
interface SpawnStep {
  type: 'step.spawn';
  id: string;
  input: AgentMachineInput;
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
 * The host's one root actor: each step's agent actor is its child, so a host keeps one actor system (its registry,
 * scheduler and clock) for its lifetime rather than one per step. A child that ends, done or in error, is stopped and
 * dropped from the children at once. Its error is handled here, not left to XState, which would otherwise error the
 * host actor and with it every other step: the step's own reply reports it (see `startAgentStep`).
 */
export const agentHostMachine = setup({
  types: { events: {} as SpawnStep | DropStep | ChildEnded },
  actors: { agent: agentMachine },
}).createMachine({
  id: 'agentHost',
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

/** Spawns steps' agent actors under one host actor, which runs from the first spawn until {@link stop}. */
export class StepActors {
  readonly #host: Actor<typeof agentHostMachine>;

  constructor(clock: Clock) {
    this.#host = createActor(agentHostMachine, { clock });
    this.#host.start();
  }

  /** Steps' agent actors running now. */
  get size(): number {
    return Object.keys(this.#host.getSnapshot().children).length;
  }

  /**
   * Spawns an agent actor with id `id` (a step's id: unique among the steps running here); `listen` attaches to it
   * before it starts. Throws when the host actor has stopped, or when `listen` threw (the actor, unheard, is then
   * stopped at once).
   */
  spawn(id: string, input: AgentMachineInput, listen: (agent: AgentActorRef) => void): AgentActorRef {
    const { status, children } = this.#host.getSnapshot();
    if (status !== 'active') throw new Error('the agent host has stopped');
    // Two actors under one id would be one child to the host, which would stop the wrong one when the other ends.
    if (children[id]) throw new Error(`step ${id} has an agent actor running here already`);
    let agent: AgentActorRef | undefined;
    let failed: { error: unknown } | undefined;
    this.#host.send({
      type: 'step.spawn',
      id,
      input,
      spawned: (spawned) => {
        agent = spawned;
        // Thrown here, it would error the host actor (an action that throws does): it is the step's failure only.
        try {
          listen(spawned);
        } catch (error) {
          failed = { error };
        }
      },
    });
    if (failed) {
      this.#host.send({ type: 'step.drop', id });
      throw failed.error;
    }
    // The host handles a spawn at once unless it is mid-transition, which nothing that spawns a step runs inside.
    if (!agent) throw new Error(`the agent actor of step ${id} was not spawned`);
    return agent;
  }

  /** Stops the host actor and with it every agent actor still running. */
  stop(): void {
    this.#host.stop();
  }
}
