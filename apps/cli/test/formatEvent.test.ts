import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { formatEvent } from '../src/format/formatEvent.ts';

const progress = (data: Partial<Extract<TroupeEvent, { kind: 'tool.progress' }>['data']>): TroupeEvent => ({
  id: 'task-1:tool.progress:task-1.execute.1:call-1:0',
  ts: '2026-11-29T12:00:01.250Z',
  pipeline: 'demo',
  taskId: 'task-1',
  kind: 'tool.progress',
  from: 'tool:files.copy',
  to: 'executor',
  traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
  data: {
    agent: 'executor',
    stepId: 'task-1.execute.1',
    callId: 'call-1',
    tool: 'files.copy',
    seq: 0,
    progress: 40,
    ...data,
  },
});

describe('formatEvent: tool.progress', () => {
  it('shows the tool, how far it got of how much, and its message on one line', () => {
    const line = formatEvent(progress({ total: 100, message: 'copying\nb.txt' }), { color: false });
    expect(line).toMatch(/^12:00:01\.250 {2}demo\/task-1 {2}tool:files\.copy → executor +tool\.progress +/);
    expect(line.endsWith('  files.copy 40/100 copying b.txt')).toBe(true);
  });

  it('shows the progress alone when there is no total and no message', () => {
    expect(formatEvent(progress({}), { color: false }).endsWith('  files.copy 40')).toBe(true);
  });
});

describe('formatEvent: values kept in the object store', () => {
  it('says where the whole of a task output shown in part is', () => {
    const event: TroupeEvent = {
      id: 'task-1:task.completed',
      ts: '2026-11-29T12:00:02.000Z',
      pipeline: 'demo',
      taskId: 'task-1',
      kind: 'task.completed',
      traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
      data: {
        output: 'xxxx\n…[cut: showing 4 of 2097152 bytes; …]',
        outputRef: {
          bucket: 'troupe-values-demo',
          name: 'task-1.write.1.output',
          bytes: 2_097_152,
          sha256: 'a'.repeat(64),
        },
        rounds: 1,
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
        usageByAgent: {},
        durationMs: 2_000,
      },
    };
    expect(
      formatEvent(event, { color: false }).endsWith(
        '(whole: 2097152 bytes, nats object get troupe-values-demo task-1.write.1.output)',
      ),
    ).toBe(true);
  });
});
