import type { EventOf } from '@troupe/protocol';
import { EventFactory, ToolRegistry } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { modelModeTools } from '../../src/evals/modelModeTools.ts';
import type { RecordedCall } from '../../src/replay/recording.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
const ctx = { workspace: '/nowhere', taskId: 't2', agent: 'worker', signal: new AbortController().signal };

/** A recorded call of `lookup` with its arguments' text and what it answered (or how it failed). */
function call(
  id: string,
  args: string,
  answer: { output: string } | { error: string; code: string },
): RecordedCall {
  const result = factory.make('tool.result', scope, {
    agent: 'worker',
    stepId: 't1.work.1',
    callId: id,
    tool: 'lookup',
    ok: 'output' in answer,
    decision: 'code' in answer && answer.code === 'denied' ? 'deny' : 'allow',
    output: 'output' in answer ? answer.output : answer.error,
    ...('output' in answer ? {} : { error: { code: answer.code, message: answer.error } }),
    durationMs: 1,
  } as never) as EventOf<'tool.result'>;
  return { callId: id, tool: 'lookup', arguments: args, result };
}

describe('modelModeTools', () => {
  const ran: unknown[] = [];
  const real = new ToolRegistry();
  real.register({
    name: 'lookup',
    description: 'Look a word up',
    input: z.object({ word: z.string(), exact: z.boolean().default(true) }),
    run: async (input) => {
      ran.push(input);
      return 'looked up for real';
    },
  });

  it('matches a call by its arguments as parsed JSON, each recorded call once and the earliest first', async () => {
    const tools = modelModeTools({
      names: ['lookup'],
      real,
      calls: [
        call('c0', '{"word":"cat"}', { error: 'lookup refused', code: 'denied' }),
        call('c1', '{ "exact": true, "word": "cat" }', { output: 'first' }),
        call('c2', '{"word":"cat"}', { output: 'second' }),
        call('c3', '{"word":"dog"}', { error: 'no such word', code: 'not_found' }),
      ],
    });
    const lookup = tools.get('lookup');
    // The executor hands a tool its input parsed by its schema: defaults filled in.
    const cat = { word: 'cat', exact: true };
    // c0 never ran (the policy refused it), so it answers nothing; key order and defaults do not count.
    expect(await lookup?.run(cat, { ...ctx, callId: 'n1' })).toBe('first');
    expect(await lookup?.run(cat, { ...ctx, callId: 'n2' })).toBe('second');
    await expect(lookup?.run({ word: 'dog', exact: true }, { ...ctx, callId: 'n3' })).rejects.toMatchObject({
      code: 'not_found',
      message: 'no such word',
    });
    await expect(lookup?.run(cat, { ...ctx, callId: 'n4' })).rejects.toThrow(
      "lookup was not run: the call is not in the recording, and model mode runs for real only read-only tools, the built-in file tools (in the run's workspace) and tools the eval names; if running lookup for real is safe here, name it (troupe eval run --run-tools lookup)",
    );
    expect(ran).toEqual([]);
  });

  /** `lookup` as `real` holds it, with the flags given. */
  function realLookup(flags: { rerunnable?: boolean; readOnly?: boolean }): ToolRegistry {
    const registry = new ToolRegistry();
    const tool = real.get('lookup');
    if (!tool) throw new Error('no lookup');
    registry.register({ ...tool, ...flags });
    return registry;
  }

  it('refuses a rerunnable tool that is not read-only: it may set a value with the new arguments', async () => {
    ran.length = 0;
    const tools = modelModeTools({ names: ['lookup'], real: realLookup({ rerunnable: true }), calls: [] });
    await expect(
      tools.get('lookup')?.run({ word: 'eel', exact: false }, { ...ctx, callId: 'n1' }),
    ).rejects.toMatchObject({ code: 'not_run', message: expect.stringContaining('--run-tools lookup') });
    expect(ran).toEqual([]);
  });

  it('runs for real, where the recording holds no matching call, a read-only tool or one the eval names', async () => {
    const cases = [
      { real: realLookup({ readOnly: true }) },
      { real: realLookup({ rerunnable: true }), runTools: ['lookup'] },
    ];
    for (const options of cases) {
      ran.length = 0;
      const tools = modelModeTools({ names: ['lookup'], calls: [], ...options });
      expect(await tools.get('lookup')?.run({ word: 'eel', exact: false }, { ...ctx, callId: 'n1' })).toBe(
        'looked up for real',
      );
      expect(ran).toEqual([{ word: 'eel', exact: false }]);
    }
  });
});
