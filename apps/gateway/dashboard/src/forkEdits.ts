/** What the fork form holds: the step to fork at, the input as typed, and new outputs typed for earlier steps. */
export interface ForkDraft {
  at: string;
  /** The input as JSON text; empty keeps the original's. */
  inputText: string;
  /** The original task's input, to tell an edit from the text the form was filled with. */
  original?: Record<string, unknown> | undefined;
  /** A new output for each earlier step (by step id); an empty or blank one keeps that step's own. */
  outputs: Record<string, string>;
}

/** `POST /v1/tasks/{id}/fork`'s body (docs/gateway.md). */
export interface ForkBody {
  at: string;
  input?: Record<string, unknown>;
  set?: Record<string, string>;
}

export type ForkCheck = { ok: true; body: ForkBody } | { ok: false; error: string };

/**
 * The fork's body from the form, checked before anything is sent: the input must be a JSON object, as a task's input
 * is. An input equal to the original's is left out (the fork keeps it), and so is an output left blank.
 */
export function forkBody(draft: ForkDraft): ForkCheck {
  const body: ForkBody = { at: draft.at };
  const text = draft.inputText.trim();
  if (text) {
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (error) {
      return { ok: false, error: `The input is not JSON: ${(error as Error).message}` };
    }
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      return { ok: false, error: 'The input must be a JSON object ({ … }), as a task’s input is' };
    }
    if (JSON.stringify(input) !== JSON.stringify(draft.original))
      body.input = input as Record<string, unknown>;
  }
  const set = Object.fromEntries(Object.entries(draft.outputs).filter(([, output]) => output.trim() !== ''));
  if (Object.keys(set).length > 0) body.set = set;
  return { ok: true, body };
}

/** What the fork form needs to know of a step's run: which step, whether it completed, whether it ran a sub-task. */
interface StepRun {
  step: string;
  outcome?: { ok: boolean } | undefined;
  subTask?: unknown;
}

/**
 * The steps whose output a fork at `at` may replace, each once, in order: those a fork reuses, which completed before
 * `at` first started. A step that failed, or a `pipeline` step (its sub-task runs again), is not reused, and the
 * gateway refuses a `set` for it.
 */
export function stepsBefore(steps: readonly StepRun[], at: string): string[] {
  const end = steps.findIndex((s) => s.step === at);
  const reused = steps
    .slice(0, Math.max(0, end))
    .filter((s) => s.outcome?.ok === true && s.subTask === undefined);
  return [...new Set(reused.map((s) => s.step))].filter((s) => s !== at);
}

/** The original's input as the form shows it first: pretty JSON, or nothing when there is none. */
export const inputText = (input: Record<string, unknown> | undefined): string =>
  input === undefined ? '' : JSON.stringify(input, null, 2);

/**
 * The runs a fork is offered on: each step's first, by step id. A fork names its step, not a round: it runs on from
 * where that step first started, so a later round of the step offers nothing more.
 */
export function firstRuns(steps: readonly { stepId: string; step: string }[]): Set<string> {
  const seen = new Map<string, string>();
  for (const s of steps) if (!seen.has(s.step)) seen.set(s.step, s.stepId);
  return new Set(seen.values());
}
