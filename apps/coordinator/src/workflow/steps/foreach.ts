import {
  applyWorkspaceChanges,
  emptyUsage,
  errorMessage,
  sumUsage,
  type TaskFailureReason,
} from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import type { EventObject } from 'xstate';
import { evaluate } from '../../config/expressions.ts';
import type { FlowScope } from '../../config/flowLayout.ts';
import type { ForeachStepConfig } from '../../config/pipelineSchema.ts';
import { parsedOutput, scopeOf } from '../compile/conditions.ts';
import type { Compiling, StepAt } from '../compile/flowList.ts';
import { recoveryOf } from '../compile/recovery.ts';
import { placed, sayNow } from '../compile/stepEvents.ts';
import { withOutput } from '../compile/workflowOutput.ts';
import {
  type ActionOf,
  assignFor,
  type ContextParam,
  type EnqueueOf,
  enqueueFor,
  type FlowEvent,
  type ItemSrc,
  type Transition,
  type WorkflowStates,
} from '../compile/workflowSetup.ts';
import type {
  ForeachProgress,
  ItemOutcome,
  ItemOutput,
  WorkflowContext,
  WorkflowFailure,
} from '../workflowTypes.ts';
import { itemContext, itemMachine, outsideOutputs } from './foreachItem.ts';

/**
 * A foreach step: on entry, `items` gives the list and the first `concurrency` items are spawned, each a workflow of
 * its own (its `do` steps, see {@link itemMachine}) kept in the task's checkpoint with its progress. As an item ends,
 * its outcome and spending are recorded, the item's workflow is stopped, and the next item is spawned. The step ends
 * when every item has: with each item's result, by its place in the list; it fails as soon as an item does when
 * `failFast`, else at the end if an item failed (never, with `onError: continue`). Leaving the state stops the items
 * still running.
 */
export function compileForeach(c: Compiling, step: ForeachStepConfig, at: StepAt): WorkflowStates {
  const src: ItemSrc = `foreach:${step.id}`;
  c.actors[src] = itemMachine(c, step);
  const items = itemsOfStep(step, src, outsideOutputs(c, step));
  const within = at.place.within;
  const recovery = recoveryOf(step, at.scope, at.next, at.resolve);
  /** The step has failed: as its `onError` says, after `items.joined`. */
  const failStep = (failure: ContextParam<WorkflowFailure>): Transition => {
    const [transition] = recovery(failure, [itemsJoined(step, false, within)]);
    return { target: transition.target, actions: [...transition.actions, forgetItems(step)] };
  };
  const { progressOf, failures, settled } = items;
  const ended = takeItemEnd(step, items);
  return {
    [step.id]: {
      id: step.id,
      entry: [startItems(step, items)],
      always: [
        {
          guard: ({ context }) => progressOf(context).problem !== undefined,
          ...failStep(({ context }) => progressOf(context).problem ?? unexplained(step)),
        },
        {
          guard: ({ context }) => items.failFast && failures(context).length > 0,
          ...failStep(({ context }) => {
            const [first] = failures(context);
            if (!first) return unexplained(step);
            const { index, failure } = first;
            return { ...failure, message: `item ${index} of ${step.id}: ${failure.message}`, step: step.id };
          }),
        },
        {
          guard: ({ context }) =>
            settled(context) && step.onError !== 'continue' && failures(context).length > 0,
          ...failStep(({ context }) => ({
            reason: 'step_failed',
            message: `foreach step ${step.id}: ${failures(context).length} of ${progressOf(context).items.length} items failed; ${failureList(failures(context))}`,
            step: step.id,
          })),
        },
        {
          guard: ({ context }) => settled(context),
          target: at.next,
          actions: [itemsJoined(step, true, within), forgetItems(step)],
        },
      ],
      on: {
        [`xstate.done.actor.each.${step.id}.*`]: { actions: ended },
        [`xstate.error.actor.each.${step.id}.*`]: { actions: ended },
        'item.ended': { actions: ended },
      },
      exit: [stopItems(step, items)],
    },
  };
}

/** A foreach step's items as its actions read and start them. */
interface StepItems {
  /** Whether an item's failure fails the step at once. */
  failFast: boolean;
  progressOf(context: WorkflowContext): ForeachProgress;
  failures(context: WorkflowContext): { index: number; failure: WorkflowFailure }[];
  /** Whether every item has ended. */
  settled(context: WorkflowContext): boolean;
  /** The id of an item's workflow: `each.<step>.<round>.<index>`. */
  childId(round: number, index: number): string;
  /** Spawns the workflow of item `index` of `items`, from the context as it is once this action's assigns apply. */
  spawn(
    context: WorkflowContext,
    enqueue: EnqueueOf<FlowEvent>,
    items: readonly unknown[],
    index: number,
  ): void;
}

function itemsOfStep(step: ForeachStepConfig, src: ItemSrc, outside: ReadonlySet<string>): StepItems {
  const progressOf = (context: WorkflowContext): ForeachProgress =>
    context.foreach?.[step.id] ?? { items: [], started: 0, results: [] };
  const childId = (round: number, index: number) => `each.${step.id}.${round}.${index}`;
  return {
    failFast: step.failFast ?? step.onError !== 'continue',
    progressOf,
    failures: (context) =>
      progressOf(context).results.flatMap((r, index) => (r && !r.ok ? [{ index, failure: r.failure }] : [])),
    settled: (context) => progressOf(context).results.every((r) => r !== null),
    childId,
    spawn: (context, enqueue, items, index) =>
      enqueue.spawnChild(src, {
        id: childId(context.round, index),
        input: itemContext(context, step, outside, index, items[index]),
        syncSnapshot: true,
      }),
  };
}

/** On entry: the list, and its first `concurrency` items started (or why there is no list). */
function startItems(step: ForeachStepConfig, items: StepItems) {
  return enqueueFor<FlowEvent>(({ context, enqueue }) => {
    const listed = listItems(step, context);
    if (!listed.ok) {
      const progress: ForeachProgress = { items: [], started: 0, results: [], problem: listed.failure };
      enqueue.assign({ foreach: { ...context.foreach, [step.id]: progress } });
      return;
    }
    const list = listed.items;
    const started = Math.min(step.concurrency, list.length);
    const progress: ForeachProgress = { items: list, started, results: list.map(() => null) };
    const updated = { ...context, foreach: { ...context.foreach, [step.id]: progress } };
    enqueue.assign({ foreach: updated.foreach });
    for (let index = 0; index < started; index++) items.spawn(updated, enqueue, list, index);
  });
}

/** An item has ended: its outcome, spending and files recorded, its workflow stopped, the next item started. */
function takeItemEnd(step: ForeachStepConfig, items: StepItems) {
  return enqueueFor<FlowEvent>(({ context, event, enqueue }) => {
    const end = itemEnd(event);
    if (!end?.id.startsWith(`each.${step.id}.`)) return;
    const { id } = end;
    const parts = id.split('.');
    const round = Number(parts.at(-2));
    const index = Number(parts.at(-1));
    const progress = items.progressOf(context);
    // A stopped item's last word, or a round's before this one: nothing to record.
    if (round !== context.round || progress.results[index] !== null) return;
    const output = end.output;
    const outcome: ItemOutcome = output
      ? output.ok
        ? { ok: true, output: output.output }
        : { ok: false, failure: output.failure }
      : {
          ok: false,
          failure: {
            reason: 'internal',
            message: `its workflow crashed: ${errorMessage(end.error)}`,
            step: step.id,
          },
        };
    const results = progress.results.map((r, i) => (i === index ? outcome : r));
    const more = !(items.failFast && !outcome.ok) && progress.started < progress.items.length;
    const started = progress.started + (more ? 1 : 0);
    const usage = output?.usage ?? emptyUsage();
    const usageByAgent = { ...context.usageByAgent };
    for (const [agent, spent] of Object.entries(output?.usageByAgent ?? {}))
      usageByAgent[agent] = sumUsage(usageByAgent[agent] ?? emptyUsage(), spent);
    // An item's files join the task's as it ends, as a step's do: the last item to end wins a path two wrote.
    const workspace = output?.workspace
      ? applyWorkspaceChanges(context.workspace, output.workspace)
      : context.workspace;
    const foreach = { ...context.foreach, [step.id]: { ...progress, results, started } };
    // An item whose workflow crashed says nothing of its steps: one may have asked a person.
    const asked = context.askedPeople || !output || output.askedPeople ? { askedPeople: true as const } : {};
    const updated: WorkflowContext = {
      ...context,
      usage: sumUsage(context.usage, usage),
      usageByAgent,
      foreach,
      ...(workspace ? { workspace } : {}),
      ...asked,
    };
    enqueue.assign({
      usage: updated.usage,
      usageByAgent,
      foreach,
      ...(workspace ? { workspace } : {}),
      ...asked,
    });
    enqueue.stopChild(id);
    if (more) items.spawn(updated, enqueue, progress.items, progress.started);
  });
}

/**
 * Leaving the step — it failed fast, the task was cancelled, a `first` join moved on — stops what still runs,
 * counting what it spent (its steps that had finished) in the task's usage.
 */
function stopItems(step: ForeachStepConfig, items: StepItems) {
  return enqueueFor<FlowEvent>(({ context, enqueue, self }) => {
    const progress = context.foreach?.[step.id];
    if (!progress) return;
    const children = self.getSnapshot().children;
    let usage = context.usage;
    const usageByAgent = { ...context.usageByAgent };
    // A stopped item's step in flight may have asked a person: its workflow is stopped, not left by a transition.
    let stoppedOne = false;
    progress.results.forEach((r, index) => {
      if (r !== null || index >= progress.started) return;
      stoppedOne = true;
      const id = items.childId(context.round, index);
      // An item's workflow is a machine over the workflow's own context (see ItemLogic).
      const spent: WorkflowContext | undefined = children[id]?.getSnapshot()?.context;
      if (spent) {
        usage = sumUsage(usage, spent.usage);
        for (const [agent, u] of Object.entries(spent.usageByAgent))
          usageByAgent[agent] = sumUsage(usageByAgent[agent] ?? emptyUsage(), u);
      }
      enqueue.stopChild(id);
    });
    enqueue.assign({ usage, usageByAgent, ...(stoppedOne ? { askedPeople: true as const } : {}) });
  });
}

/** An item's end, from xstate's event for its workflow's end or the `item.ended` a restored workflow is told. */
function itemEnd(event: FlowEvent): { id: string; output?: ItemOutput; error?: unknown } | undefined {
  if (event.type === 'item.ended') return event;
  const done = /^xstate\.done\.actor\.(.*)$/.exec(event.type);
  if (done && 'output' in event) return { id: done[1] ?? '', output: event.output };
  const failed = /^xstate\.error\.actor\.(.*)$/.exec(event.type);
  if (failed && 'error' in event) return { id: failed[1] ?? '', error: event.error };
  return undefined;
}

/** A failure that has no cause on record: a bug, said as such. */
const unexplained = (step: ForeachStepConfig): WorkflowFailure => ({
  reason: 'internal',
  message: `foreach step ${step.id}: it failed with no cause on record`,
  step: step.id,
});

/**
 * Forgets a foreach step's items once it has ended (its output has their results): later checkpoints need not carry
 * them twice. Last in the step's final transition, after whatever reads them.
 */
function forgetItems(step: ForeachStepConfig) {
  return assignFor(({ context }) => {
    const { [step.id]: _ended, ...others } = context.foreach ?? {};
    return { foreach: others };
  });
}

/** Failed items for a message: the first five, each its message cut at 500 characters, and how many more. */
function failureList(failed: readonly { index: number; failure: WorkflowFailure }[]): string {
  const shown = failed
    .slice(0, 5)
    .map(({ index, failure }) => `item ${index}: ${preview(failure.message, 500)}`);
  return `${shown.join('; ')}${failed.length > 5 ? `; and ${failed.length - 5} more` : ''}`;
}

/** A foreach step's list: what `items` gives, when it is a list no longer than `maxItems`; else why not. */
function listItems(
  step: ForeachStepConfig,
  context: WorkflowContext,
): { ok: true; items: unknown[] } | { ok: false; failure: WorkflowFailure } {
  const result = evaluate(step.items, scopeOf(context));
  const failure = (reason: TaskFailureReason, message: string) => ({
    ok: false as const,
    failure: { reason, message: `foreach step ${step.id}: ${message}`, step: step.id },
  });
  if (!result.ok) return failure('condition_failed', `its items could not be evaluated: ${result.message}`);
  if (!Array.isArray(result.value)) {
    return failure(
      'condition_failed',
      `${step.items} gave ${preview(JSON.stringify(result.value) ?? 'nothing', 200)}, not a list`,
    );
  }
  if (result.value.length > step.maxItems) {
    return failure(
      'step_failed',
      `${step.items} gave ${result.value.length} items, more than its maxItems of ${step.maxItems}; none was run`,
    );
  }
  return { ok: true, items: result.value };
}

/**
 * Ends a foreach step: its output (each item's result by its place in the list: its parsed output, `{"error": ...}`
 * for a failed item, null for one never run or stopped), and `items.joined` saying how the items ended. The next
 * hand-off is from the join.
 */
function itemsJoined<E extends EventObject = FlowEvent>(
  step: ForeachStepConfig,
  ok: boolean,
  within: readonly FlowScope[],
): ActionOf<E> {
  return enqueueFor<E>(({ context, enqueue }) => {
    const progress = context.foreach?.[step.id] ?? { items: [], started: 0, results: [] };
    const results = progress.results.map((r) =>
      r === null ? null : r.ok ? parsedOutput(r.output) : { error: r.failure.message },
    );
    enqueue.assign({ ...(ok ? withOutput(context, step, 'foreach', results) : {}), joined: step.id });
    sayNow(context, enqueue, {
      type: 'event',
      kind: 'items.joined',
      from: 'workflow',
      data: {
        step: step.id,
        round: context.round,
        items: progress.items.length,
        completed: progress.results.filter((r) => r?.ok).length,
        failed: progress.results.flatMap((r, index) =>
          r && !r.ok ? [{ index, message: preview(r.failure.message, 500) }] : [],
        ),
        stopped: progress.results.filter((r) => r === null).length,
        ok,
        ...placed(within),
      },
    });
  });
}
