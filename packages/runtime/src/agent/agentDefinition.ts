import type { ModelProvider } from '@troupe/llm';
import type { PermissionRule } from '../tools/policy.ts';
import type { OutputSpec } from './structuredReply.ts';

/** Everything the runtime needs to run one agent: who it is, its model, its tools and its policy. */
export interface AgentDefinition {
  name: string;
  instructions: string;
  model: ModelProvider;
  /** Tools the agent declared; any other tool is refused. */
  tools: readonly string[];
  rules: readonly PermissionRule[];
  /** The most model calls in one step. */
  maxTurns: number;
  temperature?: number;
  maxTokens?: number;
  /** Stream replies; deltas are published as batched `llm.delta` events. */
  stream?: boolean;
  /** Estimated tokens the conversation may hold before older turns are summarized by the model. */
  contextTokens?: number;
  /** Keep memories across tasks (`remember`/`recall` with scope `agent`). */
  longTermMemory?: boolean;
  /** How long a person has to decide on an `ask` call or answer `ask_human`; the gate's default when absent. */
  approvalTimeoutMs?: number;
  /** A JSON Schema the agent's final reply must match. */
  outputSchema?: OutputSpec;
}
