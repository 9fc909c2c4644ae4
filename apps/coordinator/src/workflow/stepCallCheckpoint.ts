import type { AnyStateMachine, Snapshot } from 'xstate';
import type { StepCallContext, StepCallInput } from './stepCall.ts';
import type { RequestInput } from './stepCallSend.ts';
import type { StepRunInput } from './workflowTypes.ts';

/** A step call's persisted snapshot, as far as its send in flight (its `request` child) goes. */
type PersistedCall = Snapshot<unknown> & {
  context: StepCallContext;
  children: Record<string, { src?: unknown; snapshot?: { input?: Partial<RequestInput> } }>;
};

/** A promise actor's persisted snapshot: what checkpoints from before the step call was a machine hold for it. */
interface PromiseSnapshot {
  input: StepRunInput;
}

/** A snapshot with an input and no state value is a promise's (a machine's always has a `value`). */
const isPromiseSnapshot = (snapshot: Snapshot<unknown>): snapshot is Snapshot<unknown> & PromiseSnapshot =>
  !('value' in snapshot) && 'input' in snapshot;

/**
 * The step call's machine with its checkpoint shape: the send in flight carries the call's own request (`sent` is
 * left whenever the request changes), so a checkpoint holds it once, in the call's context, and a restore hands it
 * back to the send it repeats. A checkpoint from before the upgrade holds the step as a promise's snapshot (its
 * input, no state): the call starts afresh from it, `resumed`.
 */
export function withCallCheckpoints<Machine extends AnyStateMachine>(machine: Machine): Machine {
  const persistMachine = machine.getPersistedSnapshot.bind(machine);
  machine.getPersistedSnapshot = (snapshot, options) => {
    const persisted = persistMachine(snapshot, options) as PersistedCall;
    return { ...persisted, children: withSends(persisted.children, ({ request: _, ...send }) => send) };
  };
  const restoreMachine = machine.restoreSnapshot.bind(machine);
  machine.restoreSnapshot = (snapshot, scope) => {
    if (isPromiseSnapshot(snapshot))
      return machine.getInitialSnapshot(scope, { ...snapshot.input, resumed: true } satisfies StepCallInput);
    const persisted = snapshot as PersistedCall;
    const { request } = persisted.context;
    const restoring: PersistedCall = {
      ...persisted,
      children: withSends(persisted.children, (send) => ({ request, ...send })),
    };
    return restoreMachine(restoring, scope);
  };
  return machine;
}

/** The persisted children with the input of the send in flight, if any, made by `change`. */
function withSends(
  children: PersistedCall['children'] | undefined,
  change: (input: Partial<RequestInput>) => Partial<RequestInput>,
): PersistedCall['children'] {
  const changed: PersistedCall['children'] = {};
  for (const [id, child] of Object.entries(children ?? {})) {
    const input = child.src === 'request' ? child.snapshot?.input : undefined;
    changed[id] =
      input === undefined ? child : { ...child, snapshot: { ...child.snapshot, input: change(input) } };
  }
  return changed;
}
