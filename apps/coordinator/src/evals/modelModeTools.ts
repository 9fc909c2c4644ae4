import { isDeepStrictEqual } from 'node:util';
import {
  askHumanTool,
  fileTools,
  type Tool,
  ToolError,
  type ToolErrorCode,
  ToolRegistry,
} from '@troupe/runtime';
import { z } from 'zod';
import type { RecordedCall, ValueReader } from '../replay/recording.ts';

/** Error codes of a recorded call that never ran: the policy, a person or the executor refused it first. */
const NOT_RUN = new Set([
  'denied',
  'approval_required',
  'invalid_tool',
  'invalid_arguments',
  'unknown_tool',
  'not_declared',
  'cancelled',
]);

export interface ModelModeToolsOptions {
  /** The tool names the pipeline's agents declare: each gets a tool, whether it could run here or not. */
  names: Iterable<string>;
  /**
   * The tools that could run for real where the recording has no matching call: built-ins, the pipeline's modules,
   * its MCP servers'. Only some of them do (see {@link modelModeTools}); memory tools are left out by the caller.
   */
  real: ToolRegistry;
  /** Tools the eval names to run for real although they may change the world (`troupe eval run --run-tools`). */
  runTools?: Iterable<string>;
  /** The recorded run's calls, in order; none for a case without a recording. */
  calls: readonly RecordedCall[];
  /** Where a recorded result too large for its event is read whole. */
  values?: ValueReader;
}

/**
 * The tools of a `model` mode run: a call the recording holds (the same tool, the same arguments compared as parsed
 * JSON, each recorded call answering once, the earliest first) answers with what it returned, or fails as it failed;
 * any other call runs for real only if that cannot touch the world — a built-in file tool (confined to the run's fresh
 * workspace) or a tool that declares itself `readOnly` — or if the eval names the tool in `runTools`; otherwise it fails saying why and
 * how to allow it. So a changed prompt is judged without side effects. `rerunnable` is not enough: a tool that sets a
 * whole value (close a ticket, put a file) is rerunnable, and would change the world with the new arguments.
 */
export function modelModeTools(options: ModelModeToolsOptions): ToolRegistry {
  const unused = options.calls.filter(ran);
  const runTools = new Set(options.runTools);
  const registry = new ToolRegistry();
  for (const name of new Set(options.names)) {
    const real = options.real.get(name);
    const input = real?.input ?? z.record(z.string(), z.unknown());
    const runsForReal =
      real !== undefined && (real.readOnly === true || CONFINED.has(real) || runTools.has(name));
    const tool: Tool = {
      name,
      description: real?.description ?? `${name}, as the recorded run's calls answered`,
      input,
      ...(real?.timeoutMs === undefined ? {} : { timeoutMs: real.timeoutMs }),
      run: async (args, context) => {
        const at = unused.findIndex(
          (call) => call.tool === name && sameArguments(input, call.arguments, args),
        );
        const recorded = at < 0 ? undefined : unused.splice(at, 1)[0];
        if (recorded) return answer(recorded, options.values);
        if (real && runsForReal) return real.run(args, context);
        throw new ToolError(
          'not_run',
          real
            ? `${name} was not run: the call is not in the recording, and model mode runs for real only read-only tools, the built-in file tools (in the run's workspace) and tools the eval names; if running ${name} for real is safe here, name it (troupe eval run --run-tools ${name})`
            : `${name} was not run: the call is not in the recording and ${name} does not run in model mode`,
        );
      },
    };
    registry.register(tool);
  }
  return registry;
}

/**
 * The built-in tools that touch nothing outside the run: the file tools, held to the run's fresh workspace, and
 * `ask_human`, whose people answer from the recording. Not `run_command` or `http_fetch`. Known by identity, so a
 * module's tool of the same name is not taken for them.
 */
const CONFINED: ReadonlySet<Tool> = new Set<Tool>([...fileTools, askHumanTool]);

/** Whether a recorded call ran (to its result or its own failure), so its answer can stand for a call now. */
function ran(call: RecordedCall): boolean {
  const result = call.result;
  return result !== undefined && !NOT_RUN.has(result.data.error?.code ?? '');
}

/** The recorded arguments, read as the tool reads its input, against the input the call now has. */
function sameArguments(schema: z.ZodType, recorded: string, given: unknown): boolean {
  let raw: unknown;
  try {
    raw = JSON.parse(recorded);
  } catch {
    return false;
  }
  const parsed = schema.safeParse(raw);
  return isDeepStrictEqual(parsed.success ? parsed.data : raw, given);
}

async function answer(call: RecordedCall, values: ValueReader | undefined): Promise<string> {
  const result = call.result;
  if (!result) throw new ToolError('not_found', `the recorded call ${call.callId} has no result`);
  if (!result.data.ok) {
    const code = (result.data.error?.code ?? 'failed') as ToolErrorCode;
    throw new ToolError(code, result.data.error?.message ?? result.data.output);
  }
  const ref = result.data.outputRef;
  return ref && values ? values.read(ref) : result.data.output;
}
