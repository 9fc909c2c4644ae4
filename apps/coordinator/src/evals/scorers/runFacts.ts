import { lastStepEnds } from '@troupe/client';
import type { TroupeEvent } from '@troupe/protocol';
import type { CaseRun } from '../evalTypes.ts';

/** The tools a run called, by name, in the order the model asked for them (its `tool.call` events). */
export function toolsCalled(run: Pick<CaseRun, 'events'>): string[] {
  return run.events.flatMap((event) => (event.kind === 'tool.call' ? [event.data.tool] : []));
}

/** The flow steps a run started, by id, in order: a step run again (a review's next round) is listed again. */
export function stepsRun(run: Pick<CaseRun, 'events'>): string[] {
  return run.events.flatMap((event) => (event.kind === 'step.started' ? [event.data.step] : []));
}

/** What a step of the flow did, over all its runs: CEL reads it as `steps.<id>`. */
export interface StepFacts {
  /** Its highest round (a review step sent back twice ran 3). */
  rounds: number;
  /** How its last run ended. */
  ok: boolean;
  /** Its last verdict's decision (`approve` or `reject`), or null when it gave none. */
  verdict: string | null;
  /** Its last run's output (its preview, where the event kept only that). */
  output: string;
  /** The time its runs took, added up: a run that ended twice (asked again after a crash), its last end's. */
  durationMs: number;
}

/** Each step that ended, by its id in the flow. */
export function stepFacts(run: Pick<CaseRun, 'events'>): Record<string, StepFacts> {
  const facts: Record<string, StepFacts> = {};
  // Each run once, by its last end: a run that ended twice counts the end the task went on with.
  for (const end of lastStepEnds(run.events).values()) {
    const { step, round, ok, verdict, output, durationMs } = end.data;
    const before = facts[step];
    facts[step] = {
      rounds: Math.max(round, before?.rounds ?? 0),
      ok,
      verdict: verdict?.decision ?? null,
      output,
      durationMs: (before?.durationMs ?? 0) + durationMs,
    };
  }
  return facts;
}

/**
 * What a run tried that a guard stopped. `denied`: calls refused by a permission (a `deny` rule, no matching rule, a
 * person's denial or an expired approval, a tool the agent did not declare); `sandboxRefusals`: calls the workspace
 * confinement refused (a path out of the workspace, `path_outside_workspace`) — what a run_command does inside its
 * sandbox is its exit code, not a refusal; `approvalsAsked`: calls that waited for a person's decision.
 */
export interface SafetyCounts {
  denied: number;
  sandboxRefusals: number;
  approvalsAsked: number;
}

const DENIED_CODES = new Set(['denied', 'not_declared']);
const SANDBOX_CODES = new Set(['path_outside_workspace']);

export function safetyCounts(run: Pick<CaseRun, 'events'>): SafetyCounts {
  const counts: SafetyCounts = { denied: 0, sandboxRefusals: 0, approvalsAsked: 0 };
  for (const event of run.events) {
    if (event.kind === 'approval.requested') counts.approvalsAsked += 1;
    const code = refusalCode(event);
    if (code === undefined) continue;
    if (DENIED_CODES.has(code)) counts.denied += 1;
    if (SANDBOX_CODES.has(code)) counts.sandboxRefusals += 1;
  }
  return counts;
}

function refusalCode(event: TroupeEvent): string | undefined {
  if (event.kind !== 'tool.result' || event.data.ok) return undefined;
  return event.data.error?.code;
}
