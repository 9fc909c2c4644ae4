import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { formatEvent } from '../src/format/formatEvent.ts';

type Accepted = Extract<TroupeEvent, { kind: 'task.accepted' }>['data'];
const accepted = (data: Partial<Accepted>): TroupeEvent => ({
  id: 'task-2:task.accepted',
  ts: '2026-11-29T12:00:01.250Z',
  pipeline: 'demo',
  taskId: 'task-2',
  kind: 'task.accepted',
  from: 'user',
  to: 'demo',
  traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
  data: { goal: 'write, read, check', ...data },
});
const origin = { taskId: 'task-1', kind: 'restart', step: 'read' } as const;

describe("formatEvent: a restart's task.accepted", () => {
  it('says what workspace files it carried, or why none, as docs/cli.md says troupe tail shows', () => {
    expect(formatEvent(accepted({}), { color: false }).endsWith('  write, read, check')).toBe(true);
    const carried = formatEvent(accepted({ origin, workspace: { files: 3, bytes: 2048 } }), { color: false });
    expect(
      carried.endsWith('  write, read, check · 3 workspace files (2048 bytes) carried from task-1'),
    ).toBe(true);
    const note =
      'no workspace files are carried from task task-1: its events record none handed on before step read started';
    const none = formatEvent(accepted({ origin, workspace: { files: 0, bytes: 0, note } }), { color: false });
    expect(none).toContain(`  write, read, check · ${note}`);
  });
});
