import type { ChatMessage } from '@troupe/llm';
import type { AgentStepRequest } from '@troupe/protocol';

/** What a reviewer is told to answer with: its verdict as JSON. */
export const VERDICT_INSTRUCTIONS =
  'You are reviewing the work above. When you have decided, reply with only a JSON object: ' +
  '{"decision": "approve" | "reject", "feedback": "<what must change, or a short note>"}.';

/** The opening conversation of a step: the agent's instructions, then the task and what earlier steps produced. */
export function buildStepMessages(instructions: string, request: AgentStepRequest): ChatMessage[] {
  const own =
    request.instructions === undefined
      ? instructions.trim()
      : `${instructions.trim()}\n\n${request.instructions}`;
  const system = request.expect === 'verdict' ? `${own}\n\n${VERDICT_INSTRUCTIONS}` : own;
  return [
    { role: 'system', content: system },
    { role: 'user', content: buildTaskText(request) },
  ];
}

/** What a step asks of its agent: the task, its input, the earlier steps' outputs and a reviewer's feedback. */
export function buildTaskText(request: AgentStepRequest): string {
  const sections = [`# Task\n${request.goal}`];
  if (request.input !== undefined) sections.push(`# Input\n${JSON.stringify(request.input, null, 2)}`);
  for (const previous of request.context) {
    sections.push(
      `# Output of step "${previous.step}" (${previous.agent}, round ${previous.round})\n${previous.output}`,
    );
  }
  if (request.feedback !== undefined) {
    sections.push(`# Reviewer feedback (round ${request.round - 1}) — address it\n${request.feedback}`);
  }
  return sections.join('\n\n');
}
