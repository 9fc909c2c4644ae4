import { emptyUsage, noWorkspaceChanges, workspaceDiff } from '@troupe/protocol';
import { emit } from 'xstate';
import { stepsReadBy } from '../../config/expressions.ts';
import { actorOf, allSteps, isWork } from '../../config/flowLayout.ts';
import type { ForeachStepConfig, StepConfig } from '../../config/pipelineSchema.ts';
import { parsedOutput } from '../compile/conditions.ts';
import { type Compiling, compileList, initialKey, placeOf, TOP_SCOPE } from '../compile/flowList.ts';
import { taskSpent, withInput } from '../compile/stepRequest.ts';
import { FINAL_IDS, type ItemLogic, itemSetup, type WorkflowStates } from '../compile/workflowSetup.ts';
import { reuseOfItem } from '../reusedStep.ts';
import type { ItemOutput, WorkflowContext, WorkflowEvent } from '../workflowTypes.ts';

/**
 * The workflow of one item of a foreach step: its `do` steps as a list of their own, ending `completed` or `failed`.
 * It starts from the task's workflow as the item starts (see {@link itemContext}), and passes what it emits up.
 */
export function itemMachine(c: Compiling, step: ForeachStepConfig): ItemLogic {
  const inner: Compiling = { ...c, actors: {} };
  const states: WorkflowStates = {
    ...compileList(inner, step.do, TOP_SCOPE),
    completed: { id: FINAL_IDS.completed, type: 'final' },
    failed: { id: FINAL_IDS.failed, type: 'final' },
  };
  return itemSetup
    .createMachine({
      id: `workflow:${c.config.name}:${step.id}`,
      context: ({ input }) => input,
      initial: initialKey(step.do),
      on: { 'item.said': { actions: emit(({ event }) => event.event) } },
      states,
      output: ({ context }) => itemOutput(step, context),
    })
    .provide({ actors: { ...c.provided, ...inner.actors } });
}

/**
 * Where an item starts: the task as it is, its input with the item (`input.item`, `input.index`), the outputs of
 * earlier steps its `do` steps may read, the round and any feedback of a rework, and what the task has spent (its
 * budgets count it). Its own spending starts at nothing, and is added to the task's when it ends.
 */
export function itemContext(
  context: WorkflowContext,
  step: ForeachStepConfig,
  outside: ReadonlySet<string>,
  index: number,
  item: unknown,
): WorkflowContext {
  const pick = <T>(record: Record<string, T> | undefined) =>
    Object.fromEntries(Object.entries(record ?? {}).filter(([id]) => outside.has(id)));
  const { task } = context;
  const previous = previousResult(context, step, index);
  return {
    // A restart's or fork's reuse, cut to this item's runs: every item's checkpoint holds its own only.
    task: reuseOfItem(withInput(task, { item, index }), index, { step: step.id, item }),
    round: context.round,
    rejections: {},
    latest: pick(context.latest),
    ...(previous ? { previous } : {}),
    errors: pick(context.errors),
    usage: emptyUsage(),
    usageByAgent: {},
    ...(context.approved === undefined ? {} : { approved: context.approved }),
    ...(context.feedback === undefined ? {} : { feedback: context.feedback }),
    ...(context.lastAgent === undefined ? {} : { lastAgent: context.lastAgent }),
    ...(context.joined === undefined ? {} : { joined: context.joined }),
    item: { step: step.id, index },
    spent: { usage: taskSpent(context), byAgent: context.usageByAgent },
    ...(context.workspace ? { workspace: context.workspace, itemBase: context.workspace } : {}),
  };
}

/**
 * What an item gave in the round a review rejected: its result, as its last step of work's own previous output, so
 * that step sees what it did last time, as any reworked step does.
 */
function previousResult(
  context: WorkflowContext,
  step: ForeachStepConfig,
  index: number,
): WorkflowContext['previous'] {
  const stale = context.previous?.[step.id];
  const last = [...step.do].reverse().find(isWork);
  if (!stale || !last) return undefined;
  const results = parsedOutput(stale.output);
  const result = Array.isArray(results) ? results[index] : undefined;
  if (result === undefined || result === null || (typeof result === 'object' && 'error' in result))
    return undefined;
  const output = typeof result === 'string' ? result : JSON.stringify(result);
  return { [last.id]: { step: last.id, agent: actorOf(last), round: stale.round, output } };
}

/**
 * The earlier steps whose outputs a foreach step's `do` steps may read (their `context`, else every step before
 * them, and what their conditions name): only those are copied into each item's checkpoint.
 */
export function outsideOutputs(c: Compiling, step: ForeachStepConfig): Set<string> {
  const inside = new Set(allSteps(step.do).map((s) => s.id));
  const read = allSteps(step.do).flatMap((s) => {
    const context = contextOf(s) ?? placeOf(c, s.id).before;
    const conditions = [s.when, s.kind === 'route' ? s.on : undefined].filter((e) => e !== undefined);
    return [...context, ...conditions.flatMap(stepsReadBy)];
  });
  // A parallel step before the foreach: its branches' steps may be read too.
  const expanded = read.flatMap((id) => {
    const held = c.places.get(id)?.step;
    return held?.kind === 'parallel' ? allSteps([held]).map((s) => s.id) : [id];
  });
  return new Set(expanded.filter((id) => !inside.has(id)));
}

/** The earlier steps a step says it reads (its `context`), for the kinds that may say. */
function contextOf(step: StepConfig): string[] | undefined {
  switch (step.kind) {
    case 'agent':
    case 'review':
    case 'route':
    case 'pipeline':
      return step.context;
    default:
      return undefined;
  }
}

/** How an item's workflow ended: the output of its last step of work, or its failure; and what it spent. */
function itemOutput(step: ForeachStepConfig, context: WorkflowContext): ItemOutput {
  const changed = context.workspace ? workspaceDiff(context.itemBase, context.workspace) : undefined;
  const spending = {
    usage: context.usage,
    usageByAgent: context.usageByAgent,
    ...(changed && !noWorkspaceChanges(changed) ? { workspace: changed } : {}),
    ...(context.askedPeople ? { askedPeople: true as const } : {}),
  };
  if (context.failure) return { ok: false, failure: context.failure, ...spending };
  const lastWork = [...step.do].reverse().find((s) => isWork(s) && context.latest[s.id]);
  return { ok: true, output: lastWork ? (context.latest[lastWork.id]?.output ?? '') : '', ...spending };
}

/** A workflow's child actors, by id, as a snapshot holds them. */
export type Children = Record<string, { getSnapshot(): unknown } | undefined>;

/** What is read of a foreach item's workflow: where it is, and how it ended. */
interface ItemSnapshot {
  status: string;
  value?: unknown;
  output?: ItemOutput;
  error?: unknown;
}

/** Whether a child's snapshot says how it is (a machine's; one that could not be restored has only its error). */
function isItemSnapshot(snapshot: unknown): snapshot is ItemSnapshot {
  return typeof snapshot === 'object' && snapshot !== null && 'status' in snapshot;
}

/** The workflows of foreach items among a workflow's children (ids `each.<step>.<round>.<index>`). */
export function itemsOf(children: Children): { id: string; item: ItemSnapshot }[] {
  return Object.entries(children).flatMap(([id, child]) => {
    const item = child?.getSnapshot();
    return id.startsWith('each.') && isItemSnapshot(item) ? [{ id, item }] : [];
  });
}

/**
 * Tells a restored workflow again of the items whose workflows had ended when its checkpoint was taken but whose
 * ends it had not yet taken (an item's last step says what it did before the item ends, and that is checkpointed):
 * xstate restores them ended and starts only those still active, so their ends would never be heard.
 */
export function hearEndedItems(actor: {
  getSnapshot(): { children: Children };
  send(event: WorkflowEvent): void;
}): void {
  for (const { id, item } of itemsOf(actor.getSnapshot().children)) {
    if (item.status === 'done')
      actor.send({ type: 'item.ended', id, ...(item.output ? { output: item.output } : {}) });
    else if (item.status === 'error') actor.send({ type: 'item.ended', id, error: item.error });
  }
}

/**
 * A foreach item whose workflow could not be restored from the task's checkpoint (its steps changed since), with
 * why; xstate restores each item apart, so the task's workflow restores fine without it.
 */
export function unfitItem(snapshot: { children: Children }): { error: unknown } | undefined {
  const unfit = itemsOf(snapshot.children).find(({ item }) => item.status === 'error');
  return unfit && { error: unfit.item.error };
}
