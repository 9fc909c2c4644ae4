import type { StepActivity } from '@troupe/protocol';
import { type Clock, type HumanGate, StepJournal } from '@troupe/runtime';
import { z } from 'zod';
import type { TaskSteering } from '../task/taskSteering.ts';
import type { PeopleInFlight, PersonWait } from './peopleInFlight.ts';
import { heldSoFar as heldOf } from './stepCallRules.ts';
import { whileHeld } from './subTaskSteering.ts';
import type { HumanRunInput, HumanRunOutput } from './workflowTypes.ts';

/** How many times a `human` step asks when the answers keep missing its schema. */
export const MAX_ASKS = 3;

export interface HumanStepDeps {
  /** A gate that leaves its questions pending when a wait is cut short: the task's ending closes them. */
  gate: HumanGate;
  journal: StepJournal;
  clock: Clock;
  /** Says the task waits on a person (it parks, and `troupe status` shows the question). */
  onActivity: (taskId: string, activity: StepActivity) => void;
  /** The task's steering (`troupe pause`): a held task asks nobody new, and its held time is not the step's. */
  steering?: TaskSteering | undefined;
  /**
   * The runner's human steps under way, when its tasks are passivated (`task/passivation.ts`): each run goes on
   * there while its task sleeps, and a step restored from the task's snapshot adopts it rather than run anew.
   */
  inFlight?: PeopleInFlight | undefined;
}

/**
 * Runs a `human` step: puts its prompt to people as a question (`troupe answer`, the gateway) and waits for the
 * answer, the deadline, or the step being left. The question's id is journaled before anyone is asked, so a run of
 * the task resumed after a crash waits on the same question — and takes an answer given while nothing ran.
 *
 * A paused task holds its human step as it holds an agent step: a question not asked yet is asked once the task is
 * resumed; one asked already stays open, and an answer given while paused is the step's output (the task then holds
 * before its next step). The time held does not count against the step's timeout: a question that expires while (or
 * after) the task was held is asked again, once the task is resumed, with the step's time that was left.
 */
export function createHumanStepRunner(deps: HumanStepDeps) {
  const { onActivity, inFlight, ...asking } = deps;
  return (input: HumanRunInput, signal: AbortSignal): Promise<HumanRunOutput> => {
    if (!inFlight) return askPerson(asking, input, signal, (activity) => onActivity(input.taskId, activity));
    const { taskId, stepId } = input;
    // Restored after its task slept: the run under way goes on, heard from here (no second question, same times).
    const adopted = inFlight.adopt(taskId, stepId, signal, onActivity);
    if (adopted) return adopted;
    const leave = leavesPending(asking.gate, stepId);
    return inFlight.start(taskId, stepId, { signal, report: onActivity, leave }, (wait) =>
      runOutside(asking, input, wait),
    );
  };
}

/** What a run of a `human` step works with; what it does goes to a `report` of its own. */
type AskingDeps = Omit<HumanStepDeps, 'onActivity' | 'inFlight'>;

/**
 * A run of a `human` step that may outlive its task's tree: stopped by `wait`'s signal, telling its activity to the tree
 * that hears `wait` now. Made here, apart from the step's actor, so nothing the run keeps holds that actor's tree.
 */
function runOutside(deps: AskingDeps, input: HumanRunInput, wait: PersonWait): Promise<HumanRunOutput> {
  return askPerson(deps, input, wait.signal, (activity) => wait.report(activity));
}

/** Leaves the step's question pending in KV when its run is stopped (for the run that takes it up next). */
function leavesPending(gate: HumanGate, stepId: string): () => void {
  return () => gate.leavePending?.(stepId);
}

/** One run of a `human` step: `signal` stops it; what it does (it waits on a person) goes to `report`. */
async function askPerson(
  deps: AskingDeps,
  input: HumanRunInput,
  signal: AbortSignal,
  report: (activity: StepActivity) => void,
): Promise<HumanRunOutput> {
  const started = deps.clock.now();
  const durationMs = () => Math.max(0, deps.clock.now() - started);
  const { steering } = deps;
  /** How long the task was held in all, up to now (the pause in force counted so far). */
  const heldSoFar = () => (steering === undefined ? 0 : heldOf(steering, deps.clock.now()));
  const heldBefore = heldSoFar();
  // A question asked stays answerable and does not run out while the task is held; let go, it has what it had left.
  const unfollow = followHold(deps, input.taskId);
  /** The step's time left: its timeout less the time it waited while the task was not held. */
  const timeLeft = () => input.timeoutMs - (durationMs() - (heldSoFar() - heldBefore));
  // Each question its own journal key: one asked again after a hold is a new question, not the expired one.
  let asks = 0;
  // The config holds `answer` as a JSON object (a record); zod reads it as the JSON Schema it is meant to be.
  const schema =
    input.answer === undefined ? undefined : z.fromJSONSchema(input.answer as z.core.JSONSchema.JSONSchema);
  let prompt = input.prompt;
  try {
    for (let asked = 1; asked <= MAX_ASKS; asked++) {
      asks += 1;
      const key = StepJournal.humanKey(`${input.stepId}.${asks}`, 'question');
      const waiting = (id: string) =>
        report({
          kind: 'person',
          step: input.step,
          agent: 'human',
          request: { kind: 'question', id },
          since: new Date(deps.clock.now()).toISOString(),
        });
      const earlier = await deps.journal.humanRequest(key);
      if (earlier) waiting(earlier);
      // A held task asks nobody new: the question goes once it is resumed (one asked before stays open meanwhile).
      else if (steering) await whileHeld(steering, signal);
      // Left while held (the coordinator stops, the task ends): nobody is asked by a run that is over.
      if (signal.aborted) throw signal.reason ?? new Error('the human step was stopped');
      const heldAtAsk = heldSoFar();
      let answer: string;
      try {
        answer = await deps.gate.ask(
          prompt,
          {
            pipeline: input.pipeline,
            taskId: input.taskId,
            traceparent: input.traceparent,
            agent: 'workflow',
            stepId: input.stepId,
            // Asked again, people have what is left of the step's time, not all of it anew.
            timeoutMs: Math.max(1_000, timeLeft()),
          },
          signal,
          {
            ...(earlier ? { id: earlier } : {}),
            onAsked: async (id) => {
              await deps.journal.recordHumanRequest(key, id, new Date(deps.clock.now()));
              waiting(id);
            },
          },
        );
      } catch (error) {
        if ((error as { code?: unknown }).code !== 'timeout') throw error;
        // The question ran out while the task was held: that time was not the step's, and it is asked again. So it
        // is when an earlier run of the step asked it again already (a restart): that question is taken up.
        // Held now counts too: a run restored while the task is held finds its question expired at once, the clock
        // not moved on since it asked.
        const heldMeanwhile = (steering?.held === true || heldSoFar() > heldAtAsk) && timeLeft() > 0;
        const askedAgain =
          !heldMeanwhile &&
          (await deps.journal.humanRequest(StepJournal.humanKey(`${input.stepId}.${asks + 1}`, 'question')));
        if ((heldMeanwhile || askedAgain) && !signal.aborted) {
          asked -= 1;
          continue;
        }
        return { ok: false, code: 'timeout', message: (error as Error).message, durationMs: durationMs() };
      }
      if (!schema) return { ok: true, answer, durationMs: durationMs() };
      // Read as JSON first (`{"ship": true}`, `3`); when that does not fit, as the text it is (`123` for a string).
      const asJsonValue = schema.safeParse(asJson(answer));
      const checked = asJsonValue.success ? asJsonValue : schema.safeParse(answer);
      if (checked.success) {
        const value = checked.data;
        return {
          ok: true,
          answer: typeof value === 'string' ? value : JSON.stringify(value),
          durationMs: durationMs(),
        };
      }
      const why = (asJsonValue.error?.issues ?? [])
        .map((i) => `${i.path.join('.') || '(the answer)'}: ${i.message}`)
        .join('; ');
      if (asked === MAX_ASKS) {
        return {
          ok: false,
          code: 'invalid_answer',
          message: `${MAX_ASKS} answers in a row did not match the step's answer schema; the last: ${why}`,
          durationMs: durationMs(),
        };
      }
      prompt = `${input.prompt}\n\nYour last answer could not be used (${why}). Answer with JSON matching this JSON Schema: ${JSON.stringify(input.answer)}`;
    }
  } finally {
    unfollow();
  }
  throw new Error('unreachable');
}

/**
 * Holds the task's questions at the gate while the task is held, and lets them go when it is let go. Told now too: a
 * run restored paused takes its question up held, and one restored after the resume lets a held question go.
 */
function followHold(deps: AskingDeps, taskId: string): () => void {
  const { steering, gate } = deps;
  if (!steering || !gate.hold || !gate.letGo) return () => {};
  const tell = (held: boolean) => (held ? gate.hold?.(taskId) : gate.letGo?.(taskId));
  tell(steering.held);
  return steering.listen(tell);
}

/** An answer as JSON when it is JSON (`{"ship": true}`, `3`), else as the text it is. */
function asJson(answer: string): unknown {
  try {
    return JSON.parse(answer);
  } catch {
    return answer;
  }
}
