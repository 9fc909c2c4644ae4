import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { fileTools } from '../../src/tools/fileTools.ts';
import type { AgentPolicy } from '../../src/tools/policy.ts';
import { defineTool, type Tool, type ToolContext } from '../../src/tools/tool.ts';
import { ToolError } from '../../src/tools/toolError.ts';
import { ToolExecutor, type ToolExecutorOptions } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { useTempDirs } from './tempDirs.ts';

const tempDir = useTempDirs();

const echo = defineTool({
  name: 'echo',
  description: 'Repeat the text back',
  input: z.object({ text: z.string(), times: z.number().int().min(1).default(1) }),
  run: async ({ text, times }) => text.repeat(times),
});

function fails(name: string, error: unknown): Tool {
  return defineTool({
    name,
    description: 'Always fails',
    input: z.object({}),
    run: async () => {
      throw error;
    },
  });
}

/** A tool that never settles and records the signal it was given. */
function hanging(signals: AbortSignal[], timeoutMs?: number): Tool {
  return {
    name: 'hang',
    description: 'Never returns',
    input: z.object({}),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    run: (_input, ctx) => {
      signals.push(ctx.signal);
      return new Promise<string>(() => {});
    },
  };
}

function executor(tools: Tool[], overrides: Partial<ToolExecutorOptions> = {}): ToolExecutor {
  const registry = new ToolRegistry();
  for (const tool of tools) registry.register(tool);
  const policy: AgentPolicy = { tools: tools.map((tool) => tool.name), rules: [] };
  return new ToolExecutor({
    registry,
    policy,
    agent: 'coder',
    workspace: '/nonexistent',
    taskId: 'task-1',
    ...overrides,
  });
}

const callOf = (name: string, args: unknown, id = 'call-1') => ({
  id,
  name,
  arguments: typeof args === 'string' ? args : JSON.stringify(args),
});

describe('ToolExecutor.execute: success', () => {
  it('returns the tool output with the call, decision and duration from the injected clock', async () => {
    const ticks = [100, 142];
    const result = await executor([echo], { now: () => ticks.shift() ?? 0 }).execute(
      callOf('echo', { text: 'hi', times: 2 }),
    );
    expect(result).toEqual({
      callId: 'call-1',
      tool: 'echo',
      ok: true,
      output: 'hihi',
      durationMs: 42,
      decision: 'allow',
    });
  });

  it('treats empty arguments as an empty object', async () => {
    const noArgs = defineTool({
      name: 'ping',
      description: 'Pong',
      input: z.object({}),
      run: async () => 'pong',
    });
    const result = await executor([noArgs]).execute(callOf('ping', ''));
    expect(result.ok).toBe(true);
    expect(result.output).toBe('pong');
  });

  it('gives the tool its context', async () => {
    const seen: ToolContext[] = [];
    const probe = defineTool({
      name: 'probe',
      description: 'Records its context',
      input: z.object({}),
      run: async (_input, ctx) => {
        seen.push(ctx);
        return 'ok';
      },
    });
    await executor([probe], { workspace: '/srv/task-9', taskId: 'task-9' }).execute(
      callOf('probe', {}, 'c-7'),
    );
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      workspace: '/srv/task-9',
      taskId: 'task-9',
      agent: 'coder',
      callId: 'c-7',
    });
    expect(seen[0]?.signal.aborted).toBe(false);
  });

  it('runs the file tools against a real workspace', async () => {
    const ws = await realpath(await tempDir());
    const run = executor([...fileTools], { workspace: ws });
    const wrote = await run.execute(callOf('write_file', { path: 'src/a.ts', content: 'x' }));
    expect(wrote).toMatchObject({ ok: true, output: 'wrote 1 bytes to src/a.ts' });
    await expect(readFile(path.join(ws, 'src', 'a.ts'), 'utf8')).resolves.toBe('x');
    const listed = await run.execute(callOf('list_files', {}));
    expect(listed.output).toBe('src/');
  });
});

describe('ToolExecutor.execute: refused calls', () => {
  it('names the available tools for an unknown tool', async () => {
    const result = await executor([echo, ...fileTools]).execute(callOf('delete_repo', {}));
    expect(result).toMatchObject({
      ok: false,
      decision: 'deny',
      error: {
        code: 'unknown_tool',
        message:
          'unknown tool "delete_repo"; available tools: echo, read_file, write_file, list_files, edit_file, search_files',
      },
    });
    expect(result.output).toBe(result.error?.message);
  });

  it('refuses a registered tool the agent did not declare', async () => {
    const registry = new ToolRegistry().register(echo).register(fileTools[0] as Tool);
    const run = new ToolExecutor({
      registry,
      policy: { tools: ['echo'], rules: [] },
      agent: 'reviewer',
      workspace: '/nonexistent',
      taskId: 't',
    });
    const result = await run.execute(callOf('read_file', { path: 'a' }));
    expect(result.error).toEqual({
      code: 'not_declared',
      message: 'tool read_file is not declared for agent reviewer; available tools: echo',
    });
  });

  it('returns the JSON parse message for malformed arguments', async () => {
    const result = await executor([echo]).execute(callOf('echo', '{"text": "hi"'));
    expect(result.ok).toBe(false);
    expect(result.error?.code).toBe('invalid_arguments');
    expect(result.error?.message).toMatch(/^arguments for echo are not valid JSON: .+/);
  });

  it('lists every schema violation with its path', async () => {
    const result = await executor([echo]).execute(callOf('echo', { text: 5, times: 0 }));
    expect(result.error?.code).toBe('invalid_arguments');
    expect(result.output).toBe(
      [
        'invalid arguments for echo:',
        '- text: Invalid input: expected string, received number',
        '- times: Too small: expected number to be >=1',
      ].join('\n'),
    );
  });

  it('reports a non-object argument at the top level', async () => {
    const result = await executor([echo]).execute(callOf('echo', '[1]'));
    expect(result.output).toBe(
      'invalid arguments for echo:\n- (arguments): Invalid input: expected object, received array',
    );
  });

  it('refuses a call the policy denies, with the reason', async () => {
    const run = executor([echo], {
      policy: { tools: ['echo'], rules: [{ tool: 'echo', decision: 'deny', paths: ['**'] }] },
    });
    const result = await run.execute(callOf('echo', { text: 'hi' }));
    expect(result).toMatchObject({ ok: false, decision: 'deny', error: { code: 'denied' } });
    expect(result.output).toBe(
      'echo refused: no rule for echo matches a call without path, command or url arguments; its rules cover deny paths ["**"]',
    );
  });

  it('does not run a call that needs approval, and says why', async () => {
    let ran = false;
    const tool = defineTool({
      name: 'deploy',
      description: 'Ship it',
      input: z.object({}),
      run: async () => {
        ran = true;
        return 'shipped';
      },
    });
    const run = executor([tool], {
      policy: { tools: ['deploy'], rules: [{ tool: 'deploy', decision: 'ask' }] },
    });
    const result = await run.execute(callOf('deploy', {}));
    expect(ran).toBe(false);
    expect(result).toMatchObject({ ok: false, decision: 'ask', error: { code: 'approval_required' } });
    expect(result.output).toContain("deploy needs a person's approval");
  });

  it('returns a thrown ToolError as is, with the allow decision', async () => {
    const result = await executor([fails('boom', new ToolError('not_found', 'boom: no such thing'))]).execute(
      callOf('boom', {}),
    );
    expect(result).toMatchObject({
      ok: false,
      decision: 'allow',
      output: 'boom: no such thing',
      error: { code: 'not_found', message: 'boom: no such thing' },
    });
  });

  it("keeps the code of a ToolError from another copy of the runtime (a tool module's own node_modules)", async () => {
    // What `instanceof` cannot see: a class of the same name and shape, from another copy of the package.
    class ToolError extends Error {
      override readonly name = 'ToolError';
      constructor(
        readonly code: string,
        message: string,
      ) {
        super(message);
      }
    }
    const result = await executor([
      fails('count', new ToolError('not_found', 'count: no file a.txt')),
    ]).execute(callOf('count', {}));
    expect(result.error).toEqual({ code: 'not_found', message: 'count: no file a.txt' });
    // A code this runtime does not know is not trusted: the call failed.
    const odd = await executor([fails('odd', new ToolError('exploded', 'odd: bang'))]).execute(
      callOf('odd', {}),
    );
    expect(odd.error).toEqual({ code: 'failed', message: 'odd failed: odd: bang' });
  });

  it('turns any other throw into failed', async () => {
    const result = await executor([fails('boom', new Error('disk on fire'))]).execute(callOf('boom', {}));
    expect(result.error).toEqual({ code: 'failed', message: 'boom failed: disk on fire' });
    const odd = await executor([fails('odd', 'a string')]).execute(callOf('odd', {}));
    expect(odd.error).toEqual({ code: 'failed', message: 'odd failed: a string' });
  });

  it('never throws, even when the schema itself throws', async () => {
    const cursed = defineTool({
      name: 'cursed',
      description: 'Its schema throws',
      input: z.object({}).refine(() => {
        throw new Error('refinement exploded');
      }),
      run: async () => 'unreachable',
    });
    const result = await executor([cursed]).execute(callOf('cursed', {}));
    expect(result.error).toEqual({ code: 'failed', message: 'cursed failed: refinement exploded' });
  });

  it('refuses a tool that returns something other than text', async () => {
    const sloppy = { ...echo, name: 'sloppy', run: async () => 42 as unknown as string } as Tool;
    const result = await executor([sloppy]).execute(callOf('sloppy', { text: 'x' }));
    expect(result.error).toEqual({ code: 'failed', message: 'sloppy returned number, not text' });
  });
});

describe('ToolExecutor.execute: time limits and cancellation', () => {
  it('times out a hanging tool and aborts its signal', async () => {
    const signals: AbortSignal[] = [];
    const result = await executor([hanging(signals)], { defaultTimeoutMs: 30 }).execute(callOf('hang', {}));
    expect(result).toMatchObject({
      ok: false,
      decision: 'allow',
      error: { code: 'timeout', message: 'hang timed out after 30 ms' },
    });
    expect(signals[0]?.aborted).toBe(true);
    expect(signals[0]?.reason).toBeInstanceOf(ToolError);
    expect(signals[0]?.reason).toMatchObject({ code: 'timeout' });
  });

  it("prefers the tool's own timeout", async () => {
    const result = await executor([hanging([], 20)], { defaultTimeoutMs: 60_000 }).execute(
      callOf('hang', {}),
    );
    expect(result.output).toBe('hang timed out after 20 ms');
  });

  it('cancels a running call when the caller aborts', async () => {
    const signals: AbortSignal[] = [];
    const controller = new AbortController();
    const pending = executor([hanging(signals)]).execute(callOf('hang', {}), controller.signal);
    await vi.waitFor(() => expect(signals).toHaveLength(1));
    controller.abort();
    const result = await pending;
    expect(result.error).toEqual({ code: 'cancelled', message: 'hang was cancelled' });
    expect(signals[0]?.aborted).toBe(true);
  });

  it('does not start a call when the caller already aborted', async () => {
    const signals: AbortSignal[] = [];
    const result = await executor([hanging(signals)]).execute(callOf('hang', {}), AbortSignal.abort());
    expect(result.error?.code).toBe('cancelled');
    expect(signals).toHaveLength(0);
  });
});

describe('ToolExecutor.execute: output cap', () => {
  it('truncates output over the cap with a visible marker', async () => {
    const result = await executor([echo], { maxOutputBytes: 10 }).execute(
      callOf('echo', { text: 'abcdefghijklmnop' }),
    );
    expect(result.ok).toBe(true);
    expect(result.output).toBe('abcdefghij\n…[truncated: 16 bytes total, showing first 10]');
    expect(result.truncated).toEqual({ originalBytes: 16 });
  });

  it('never cuts a multi-byte character in half', async () => {
    const result = await executor([echo], { maxOutputBytes: 4 }).execute(callOf('echo', { text: 'aé€b' }));
    expect(result.output).toBe('aé\n…[truncated: 7 bytes total, showing first 3]');
  });

  it('leaves output at the cap alone', async () => {
    const result = await executor([echo], { maxOutputBytes: 4 }).execute(callOf('echo', { text: 'abcd' }));
    expect(result.output).toBe('abcd');
    expect(result).not.toHaveProperty('truncated');
  });

  it('caps at 64 KiB by default', async () => {
    const result = await executor([echo]).execute(callOf('echo', { text: 'x', times: 70_000 }));
    expect(result.truncated).toEqual({ originalBytes: 70_000 });
    expect(result.output.startsWith('x'.repeat(65_536))).toBe(true);
    expect(result.output.endsWith('[truncated: 70000 bytes total, showing first 65536]')).toBe(true);
  });

  it('keeps the whole of a cut output under the name it is given, and says where it is', async () => {
    const kept: [string, string][] = [];
    const ref = { bucket: 'troupe-values-demo', name: 'k.result', bytes: 16, sha256: 'a'.repeat(64) };
    const keepWhole = async (name: string, whole: string) => {
      kept.push([name, whole]);
      return { ...ref, name };
    };
    const result = await executor([echo], { maxOutputBytes: 10, keepWhole }).execute(
      callOf('echo', { text: 'abcdefghijklmnop' }),
      undefined,
      undefined,
      'k.result',
    );

    expect(kept).toEqual([['k.result', 'abcdefghijklmnop']]);
    expect(result.outputRef).toEqual(ref);
    expect(result.output).toBe(
      'abcdefghij\n…[truncated: 16 bytes total, showing first 10; the whole is object "k.result" in NATS object store troupe-values-demo]',
    );
  });

  it('says so when the whole of a cut output cannot be kept', async () => {
    const keepWhole = async () => {
      throw new Error('NATS is down');
    };
    const result = await executor([echo], { maxOutputBytes: 10, keepWhole }).execute(
      callOf('echo', { text: 'abcdefghijklmnop' }),
      undefined,
      undefined,
      'k.result',
    );

    expect(result.ok).toBe(true);
    expect(result).not.toHaveProperty('outputRef');
    expect(result.output).toBe(
      'abcdefghij\n…[truncated: 16 bytes total, showing first 10; the whole could not be kept: NATS is down]',
    );
  });
});

describe('ToolExecutor.executeAll', () => {
  it('runs calls in parallel and returns results in call order', async () => {
    const events: string[] = [];
    let release: () => void = () => {};
    const bothStarted = new Promise<void>((resolve) => {
      release = resolve;
    });
    const gated = defineTool({
      name: 'gated',
      description: 'Waits until both calls have started',
      input: z.object({ label: z.string(), delay: z.number() }),
      run: async ({ label, delay }) => {
        events.push(`start ${label}`);
        if (events.length === 2) release();
        // A sequential executor never starts the second call, so the first would time out here.
        await bothStarted;
        await new Promise((resolve) => setTimeout(resolve, delay));
        events.push(`end ${label}`);
        return label;
      },
    });
    const run = executor([gated], { defaultTimeoutMs: 2_000 });
    const results = await run.executeAll([
      callOf('gated', { label: 'slow', delay: 30 }, 'c1'),
      callOf('gated', { label: 'fast', delay: 0 }, 'c2'),
    ]);
    expect(events).toEqual(['start slow', 'start fast', 'end fast', 'end slow']);
    expect(results.map((r) => [r.callId, r.ok, r.output])).toEqual([
      ['c1', true, 'slow'],
      ['c2', true, 'fast'],
    ]);
  });

  it('keeps going when one call fails', async () => {
    const results = await executor([echo]).executeAll([
      callOf('echo', { text: 'a' }, 'c1'),
      callOf('nope', {}, 'c2'),
      callOf('echo', '{', 'c3'),
    ]);
    expect(results.map((r) => [r.callId, r.error?.code ?? 'ok'])).toEqual([
      ['c1', 'ok'],
      ['c2', 'unknown_tool'],
      ['c3', 'invalid_arguments'],
    ]);
  });
});
