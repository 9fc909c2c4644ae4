import { journalKeysOf } from '@troupe/client';
import type { EventData, EventKind, JournalEntry, TroupeEvent } from '@troupe/protocol';
import { EventFactory, preview } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { Recording } from '../../src/replay/recording.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  factory.make(kind, scope, data);
const long = (c: string) => preview(c.repeat(5_000));
const usage = { inputTokens: 1, outputTokens: 1, cachedTokens: 0 };

const reply = (
  stepId: string,
  turn: number,
  content: string,
  toolCalls: { id: string; name: string }[] = [],
  journaled = false,
) =>
  make('llm.response', {
    agent: 'coder',
    stepId,
    turn,
    provider: 'openai',
    model: 'gpt-x',
    usage,
    costUsd: 0,
    finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
    content,
    toolCalls,
    durationMs: 1,
    ...(journaled ? { journaled } : {}),
  });
const call = (stepId: string, turn: number | undefined, index: number | undefined, args: string) =>
  make('tool.call', {
    agent: 'coder',
    stepId,
    ...(turn === undefined ? {} : { turn }),
    ...(index === undefined ? {} : { index }),
    callId: `c${turn}.${index}`,
    tool: 'write_file',
    arguments: args,
  });
const compacted = (stepId: string, summary: string, index?: number, before = 10) =>
  make('context.compacted', {
    agent: 'coder',
    stepId,
    before,
    after: 2,
    estimatedTokens: 100,
    summary,
    ...(index === undefined ? {} : { index }),
  });

/**
 * A run with every way an event keeps a text in part: a long reply, long arguments of a turn's second call (and of a
 * call from before calls had a position), a resumed step's replay of a reply (the first stands), long summaries
 * numbered and not, a summary repeated, and replies and summaries kept whole.
 */
const events: TroupeEvent[] = [
  make('task.accepted', { goal: 'write' }),
  reply('t1.a.1', 1, 'short', [
    { id: 'c1.0', name: 'write_file' },
    { id: 'c1.1', name: 'write_file' },
  ]),
  call('t1.a.1', 1, 0, '{"path":"a"}'),
  call('t1.a.1', 1, 1, long('{')),
  reply('t1.a.1', 2, long('a')),
  // A resumed run replays turn 2 from the journal with a reply kept whole: the first reply still stands, and its key is read.
  reply('t1.a.1', 2, 'the same reply, replayed', [], true),
  reply('t1.a.1', 3, 'whole'),
  compacted('t1.a.1', long('s'), 1),
  compacted('t1.a.1', long('s'), 1),
  compacted('t1.a.1', 'whole summary', 2),
  reply('t1.b.1', 1, 'short', [{ id: 'cx', name: 'write_file' }]),
  call('t1.b.1', 1, undefined, long('[')),
  compacted('t1.b.1', long('u'), undefined, 10),
  compacted('t1.b.1', long('u'), undefined, 10),
  compacted('t1.b.1', long('v'), undefined, 20),
  reply('t1.b.1', 2, 'a whole reply whose turn the journal forgot'),
  // A reply whose first record was replaced: not kept in part, so not read.
  reply('t1.c.1', 1, 'whole'),
  // A turn asked again after a crash (a local step's final reply is in no journal), answered otherwise and kept whole:
  // the later reply stands, so the first one's record is not read.
  reply('t1.d.1', 1, long('d')),
  reply('t1.d.1', 1, 'answered otherwise'),
];

describe('journalKeysOf', () => {
  it('names the journal records Recording.restore reads, so a recorded case is made whole without the coordinator', async () => {
    // What the dataset's recording took before: the keys Recording.restore asked a capturing reader for.
    const asked: string[] = [];
    await new Recording('t1', events).restore({
      entry: async (key): Promise<JournalEntry | undefined> => {
        asked.push(key);
        return undefined;
      },
    });
    expect(asked.length).toBeGreaterThan(0);
    expect(new Set(journalKeysOf(events))).toEqual(new Set(asked));
    expect(journalKeysOf(events).sort()).toEqual(
      ['t1.a.1.1.model', 't1.a.1.2.model', 't1.a.1.c1', 't1.b.1.1.model', 't1.b.1.c1', 't1.b.1.c2'].sort(),
    );
  });

  it('names none for a run its events kept whole', () => {
    expect(journalKeysOf([reply('t1.a.1', 1, 'whole'), compacted('t1.a.1', 'whole', 1)])).toEqual([]);
  });
});
