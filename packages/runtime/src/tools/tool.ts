import type { z } from 'zod';
import type { MemoryView } from '../memory/memoryStore.ts';
import type { PermissionRule } from './policy.ts';

/** A way to put a question to a person and wait for the answer. */
export interface HumanChannel {
  /** `callId`: the tool call asking, so a resumed step waits on the question that call asked before. */
  ask(question: string, signal: AbortSignal, callId?: string): Promise<string>;
}

/** How far a running call has got: `progress` of `total` (when known), and what it is doing. */
export interface ToolProgress {
  /** Should grow with each update, even when the total is unknown. */
  progress: number;
  total?: number;
  message?: string;
}

/** What a running tool knows about the call it serves. */
export interface ToolContext {
  /** Absolute path of the task's workspace; the directory exists. */
  workspace: string;
  taskId: string;
  agent: string;
  callId: string;
  /** Aborted on timeout or cancellation; a long-running tool should stop when it fires. */
  signal: AbortSignal;
  /** Task and agent memory (the `remember` and `recall` tools). */
  memory?: MemoryView;
  /** A person to ask (the `ask_human` tool); absent where nobody can be asked. */
  human?: HumanChannel;
  /** The permission rule that let this call through, when one did (its scopes, e.g. `network` for commands). */
  rule?: PermissionRule;
  /**
   * Reports how far the call has got; any tool may call it, as often as it likes (the executor throttles what
   * it publishes). MCP tools forward their server's progress notifications here. Absent where nobody listens.
   */
  progress?(update: ToolProgress): void;
}

/** A capability the model can call: a name, a zod schema for its arguments and the code that runs it. */
export interface Tool<I = unknown> {
  /** What the model calls it: letters, digits, `_` and `-`, at most 64 characters; MCP tools are `<server>.<tool>`. */
  name: string;
  description: string;
  /** Schema of the arguments; must be an object schema, since models send a JSON object. */
  input: z.ZodType<I>;
  /** Overrides the executor's default timeout for this tool. */
  timeoutMs?: number;
  /**
   * Safe to run again when a crash leaves it unknown whether a call finished: it only reads, or sets a whole
   * value, or picks up where it left off. Other calls cut short by a crash are not run again (see
   * docs/durability.md).
   */
  rerunnable?: boolean;
  /**
   * It only reads: a call changes nothing outside the tool's answer. Stronger than `rerunnable`, which a tool that
   * sets a whole value is too. An eval's `model` mode runs a read-only tool for real where the recording has no
   * matching call (see docs/evals.md); MCP tools take it from their server's `readOnlyHint`.
   */
  readOnly?: boolean;
  /** Returns the text the model sees; throws `ToolError` for expected failures. */
  run(input: I, ctx: ToolContext): Promise<string>;
}

/** The definition `defineTool` accepts: a `Tool` whose `run` is typed by its schema. */
export interface ToolSpec<S extends z.ZodType> {
  name: string;
  description: string;
  input: S;
  timeoutMs?: number;
  rerunnable?: boolean;
  readOnly?: boolean;
  run(input: z.infer<S>, ctx: ToolContext): Promise<string>;
}

/**
 * Defines a tool, typing `run`'s input from the schema.
 *
 * @example
 * const echo = defineTool({
 *   name: 'echo',
 *   description: 'Repeat the text back',
 *   input: z.object({ text: z.string() }),
 *   run: async ({ text }) => text,
 * });
 */
export function defineTool<S extends z.ZodType>(spec: ToolSpec<S>): Tool<z.infer<S>> {
  return spec as Tool<z.infer<S>>;
}
