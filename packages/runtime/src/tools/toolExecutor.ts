import type { ToolCall } from '@troupe/llm';
import type { ApprovalDecision, ToolDecision, ToolResult, ValueRef } from '@troupe/protocol';
import { errorMessage } from '@troupe/protocol';
import type { MemoryView } from '../memory/memoryStore.ts';
import { type AgentPolicy, evaluatePolicy, type PermissionRule, type PolicyVerdict } from './policy.ts';
import { ProgressThrottle, type ToolProgressUpdate } from './progressThrottle.ts';
import type { HumanChannel, Tool, ToolContext } from './tool.ts';
import { ToolError } from './toolError.ts';
import type { ToolRegistry } from './toolRegistry.ts';
import { truncateOutput, utf8Head } from './truncateOutput.ts';

/** What the executor needs: the tools, the agent's policy, and where and for whom it runs. */
export interface ToolExecutorOptions {
  registry: ToolRegistry;
  policy: AgentPolicy;
  /** Handed to tools that ask a person (`ask_human`). */
  human?: HumanChannel;
  /** Handed to the memory tools. */
  memory?: MemoryView;
  agent: string;
  /** Absolute path of the task's workspace; the directory exists. */
  workspace: string;
  taskId: string;
  /** Per-call timeout for tools that set none; 30 000 ms by default. */
  defaultTimeoutMs?: number;
  /** Output beyond this many UTF-8 bytes is cut with a marker; 64 KiB by default. */
  maxOutputBytes?: number;
  /**
   * Keeps the whole of an output that is cut (under the name {@link ToolExecutor.execute} is given), so the result
   * can say where it is; without it, or without a name, a cut output's rest is lost (the marker says so).
   */
  keepWhole?: (name: string, whole: string) => Promise<ValueRef>;
  /** Clock for `durationMs`, in milliseconds. */
  now?: () => number;
  /**
   * Receives the progress tools report (`ctx.progress`), at most one update per call every 250 ms, the last one
   * always before the call's result. Without it, tools get no `progress`.
   */
  onProgress?: (callId: string, tool: string, update: ToolProgressUpdate) => void;
}

/** What the policy says of a call before it runs. */
export interface CallCheck {
  callId: string;
  tool: string;
  decision: ToolDecision;
  reason: string;
}

/**
 * Runs the model's tool calls for one agent: validates arguments, applies the policy, runs the tool with a timeout
 * and caps its output. It never throws: every failure becomes a result the model can read.
 *
 * @example
 * const executor = new ToolExecutor({ registry, policy, agent: 'coder', workspace: '/srv/task-42', taskId: 'task-42' });
 * const results = await executor.executeAll(response.toolCalls, signal);
 */
export class ToolExecutor {
  readonly #registry: ToolRegistry;
  readonly #policy: AgentPolicy;
  readonly #agent: string;
  readonly #workspace: string;
  readonly #taskId: string;
  readonly #defaultTimeoutMs: number;
  readonly #maxOutputBytes: number;
  readonly #now: () => number;
  readonly #human: HumanChannel | undefined;
  readonly #memory: MemoryView | undefined;
  readonly #onProgress: ToolExecutorOptions['onProgress'];
  readonly #keepWhole: ToolExecutorOptions['keepWhole'];

  constructor(opts: ToolExecutorOptions) {
    this.#human = opts.human;
    this.#memory = opts.memory;
    this.#registry = opts.registry;
    this.#policy = opts.policy;
    this.#agent = opts.agent;
    this.#workspace = opts.workspace;
    this.#taskId = opts.taskId;
    this.#defaultTimeoutMs = opts.defaultTimeoutMs ?? 30_000;
    this.#maxOutputBytes = opts.maxOutputBytes ?? 64 * 1024;
    this.#now = opts.now ?? (() => performance.now());
    this.#onProgress = opts.onProgress;
    this.#keepWhole = opts.keepWhole;
  }

  /**
   * What the policy says of a call before anything runs: `ask` calls need a person's decision first. A call
   * that cannot run at all (unknown tool, bad arguments) is `deny`, with the reason.
   */
  async check(call: ToolCall): Promise<CallCheck> {
    try {
      const tool = this.#lookup(call.name);
      const input = await parseInput(tool, call.arguments);
      const verdict = evaluatePolicy(this.#policy, tool.name, input, { agent: this.#agent });
      return { callId: call.id, tool: call.name, decision: verdict.decision, reason: verdict.reason };
    } catch (error) {
      return {
        callId: call.id,
        tool: call.name,
        decision: 'deny',
        reason: asToolError(error, call.name).message,
      };
    }
  }

  /**
   * Runs one call; resolves with a result whatever happens. A call the policy marks `ask` runs only with an
   * `allow` decision for it; a `deny` decision refuses it with the person's reason. An output over the cap is cut
   * for the model; its whole is kept as `wholeName` (see `keepWhole`) and the result's `outputRef` names it.
   */
  async execute(
    call: ToolCall,
    signal?: AbortSignal,
    approval?: ApprovalDecision,
    wholeName?: string,
  ): Promise<ToolResult> {
    const started = this.#now();
    let decision: ToolDecision = 'deny';
    try {
      const tool = this.#lookup(call.name);
      const input = await parseInput(tool, call.arguments);
      const verdict = evaluatePolicy(this.#policy, tool.name, input, { agent: this.#agent });
      decision = verdict.decision;
      if (verdict.decision === 'deny') {
        throw new ToolError('denied', `${tool.name} refused: ${verdict.reason}`);
      }
      if (verdict.decision === 'ask') {
        if (!approval) throw approvalRequired(tool.name, verdict);
        if (approval.decision === 'deny') throw deniedByPerson(tool.name, approval);
      }
      const output = await this.#run(tool, input, call.id, signal, verdict.rule);
      return await this.#kept(this.#result(call, started, decision, { output }), output, wholeName);
    } catch (error) {
      return this.#result(call, started, decision, { error: asToolError(error, call.name) });
    }
  }

  /** A cut result with its whole kept and named; the cut says where the whole is, or that it could not be kept. */
  async #kept(result: ToolResult, whole: string, name: string | undefined): Promise<ToolResult> {
    if (result.truncated === undefined || !this.#keepWhole || name === undefined) return result;
    const head = utf8Head(Buffer.from(whole, 'utf8'), this.#maxOutputBytes);
    const shown = Buffer.byteLength(head, 'utf8');
    const total = result.truncated.originalBytes;
    try {
      const ref = await this.#keepWhole(name, whole);
      const where = `the whole is object "${ref.name}" in NATS object store ${ref.bucket}`;
      return {
        ...result,
        output: `${head}\n…[truncated: ${total} bytes total, showing first ${shown}; ${where}]`,
        outputRef: ref,
      };
    } catch (error) {
      const why = `the whole could not be kept: ${errorMessage(error)}`;
      return {
        ...result,
        output: `${head}\n…[truncated: ${total} bytes total, showing first ${shown}; ${why}]`,
      };
    }
  }

  /** Runs calls in parallel; results come back in the order of `calls`. */
  executeAll(
    calls: readonly ToolCall[],
    signal?: AbortSignal,
    approvals: ReadonlyMap<string, ApprovalDecision> = new Map(),
  ): Promise<ToolResult[]> {
    return Promise.all(calls.map((call) => this.execute(call, signal, approvals.get(call.id))));
  }

  #lookup(name: string): Tool {
    const tool = this.#registry.get(name);
    const declared = this.#policy.tools.includes(name);
    if (tool && declared) return tool;
    const available = this.#policy.tools.filter((declaredName) => this.#registry.has(declaredName));
    const offer =
      available.length > 0 ? `available tools: ${available.join(', ')}` : 'this agent has no tools';
    if (!tool) throw new ToolError('unknown_tool', `unknown tool "${name}"; ${offer}`);
    throw new ToolError('not_declared', `tool ${name} is not declared for agent ${this.#agent}; ${offer}`);
  }

  async #run(
    tool: Tool,
    input: unknown,
    callId: string,
    outer: AbortSignal | undefined,
    rule: PermissionRule | undefined,
  ): Promise<string> {
    if (outer?.aborted) throw cancelled(tool.name);
    const guard = guardRun(tool.name, tool.timeoutMs ?? this.#defaultTimeoutMs, outer);
    const onProgress = this.#onProgress;
    const throttle = onProgress
      ? new ProgressThrottle({ emit: (update) => onProgress(callId, tool.name, update), now: this.#now })
      : undefined;
    const ctx: ToolContext = {
      workspace: this.#workspace,
      taskId: this.#taskId,
      agent: this.#agent,
      callId,
      signal: guard.signal,
      ...(rule ? { rule } : {}),
      ...(this.#human ? { human: this.#human } : {}),
      ...(this.#memory ? { memory: this.#memory } : {}),
      ...(throttle ? { progress: (update) => throttle.report(update) } : {}),
    };
    try {
      const running = tool.run(input, ctx);
      // A tool that settles after it was stopped must not surface as an unhandled rejection.
      running.catch(() => undefined);
      const output = await Promise.race([running, guard.stopped]);
      if (typeof output !== 'string') {
        throw new ToolError('failed', `${tool.name} returned ${typeof output}, not text`);
      }
      return output;
    } finally {
      guard.dispose();
      throttle?.finish();
    }
  }

  #result(
    call: ToolCall,
    started: number,
    decision: ToolDecision,
    outcome: { output: string } | { error: ToolError },
  ): ToolResult {
    const text = 'output' in outcome ? outcome.output : outcome.error.message;
    const { text: output, originalBytes } = truncateOutput(text, this.#maxOutputBytes);
    const result: ToolResult = {
      callId: call.id,
      tool: call.name,
      ok: 'output' in outcome,
      output,
      durationMs: Math.round(this.#now() - started),
      decision,
    };
    if ('error' in outcome) result.error = { code: outcome.error.code, message: outcome.error.message };
    if (originalBytes !== undefined) result.truncated = { originalBytes };
    return result;
  }
}

async function parseInput(tool: Tool, rawArguments: string): Promise<unknown> {
  const json = parseJson(tool.name, rawArguments);
  const parsed = await tool.input.safeParseAsync(json);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => {
    const where = issue.path.length > 0 ? issue.path.map(String).join('.') : '(arguments)';
    return `- ${where}: ${issue.message}`;
  });
  throw new ToolError('invalid_arguments', `invalid arguments for ${tool.name}:\n${issues.join('\n')}`, {
    cause: parsed.error,
  });
}

function parseJson(toolName: string, rawArguments: string): unknown {
  // Some models send an empty string for a call without arguments.
  if (rawArguments.trim() === '') return {};
  try {
    return JSON.parse(rawArguments);
  } catch (cause) {
    const reason = errorMessage(cause);
    throw new ToolError('invalid_arguments', `arguments for ${toolName} are not valid JSON: ${reason}`, {
      cause,
    });
  }
}

interface RunGuard {
  /** The signal the tool gets; aborted with the `ToolError` that stopped it. */
  signal: AbortSignal;
  /** Rejects with that `ToolError` on timeout or cancellation. */
  stopped: Promise<never>;
  dispose(): void;
}

// Racing the run against `stopped` means a tool that ignores its signal still cannot hold the agent.
function guardRun(toolName: string, timeoutMs: number, outer: AbortSignal | undefined): RunGuard {
  const controller = new AbortController();
  let stop: (error: ToolError) => void = () => {};
  const stopped = new Promise<never>((_, reject) => {
    stop = (error) => {
      controller.abort(error);
      reject(error);
    };
  });
  const timer = setTimeout(
    () => stop(new ToolError('timeout', `${toolName} timed out after ${timeoutMs} ms`)),
    timeoutMs,
  );
  const onCancel = () => stop(cancelled(toolName));
  outer?.addEventListener('abort', onCancel, { once: true });
  const dispose = () => {
    clearTimeout(timer);
    outer?.removeEventListener('abort', onCancel);
  };
  return { signal: controller.signal, stopped, dispose };
}

function cancelled(toolName: string): ToolError {
  return new ToolError('cancelled', `${toolName} was cancelled`);
}

// Reached only when a caller runs an `ask` call without asking; the agent actor always asks first.
function approvalRequired(toolName: string, verdict: PolicyVerdict): ToolError {
  return new ToolError(
    'approval_required',
    `${toolName} needs a person's approval (${verdict.reason}) and none was given; the call did not run`,
  );
}

function deniedByPerson(toolName: string, approval: ApprovalDecision): ToolError {
  const who = approval.by ?? 'a person';
  return new ToolError('denied', `${toolName} denied by ${who}: ${approval.reason ?? 'no reason given'}`);
}

function asToolError(error: unknown, toolName: string): ToolError {
  if (error instanceof ToolError) return error;
  if (ToolError.is(error)) return new ToolError(error.code, error.message, { cause: error });
  const reason = errorMessage(error);
  return new ToolError('failed', `${toolName} failed: ${reason}`, { cause: error });
}
