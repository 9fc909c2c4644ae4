import type { ExpressionScope } from '../../config/expressions.ts';
import type { WorkflowContext } from '../workflowTypes.ts';

/** The scope a CEL condition sees: the task, its input and what each step that has run produced. */
export function scopeOf(context: WorkflowContext): ExpressionScope {
  const steps: ExpressionScope['steps'] = {};
  for (const [id, out] of Object.entries(context.latest)) steps[id] = { output: parsedOutput(out.output) };
  for (const [id, failure] of Object.entries(context.errors ?? {})) {
    steps[id] = { ...steps[id], output: steps[id]?.output ?? null, error: failure.message };
  }
  const { task } = context;
  return {
    input: task.input ?? {},
    steps,
    task: {
      id: task.taskId,
      goal: task.goal,
      pipeline: task.pipeline,
      metadata: task.metadata ?? {},
      round: context.round,
    },
  };
}

/** A step's output as conditions (and the steps after it) read it: its JSON when it is JSON, else its text. */
export function parsedOutput(output: string): unknown {
  try {
    return JSON.parse(output);
  } catch {
    return output;
  }
}

/** What a route matches its cases against: a string as it is, anything else as JSON (`true`, `3`). */
export const asText = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value));
