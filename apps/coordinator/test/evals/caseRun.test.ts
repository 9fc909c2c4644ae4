import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { caseRunOf } from '../../src/evals/caseRun.ts';
import { eventsOf, noteCase } from './scoredRuns.ts';

describe('caseRunOf', () => {
  it('reads how the task ended, its output, usage and duration from its final event', () => {
    const run = caseRunOf(noteCase, eventsOf({ output: 'Release 1.2', costUsd: 0.03, durationMs: 2500 }));
    expect(run).toMatchObject({
      case: noteCase,
      taskId: 't1',
      status: 'completed',
      output: 'Release 1.2',
      usage: { costUsd: 0.03, modelCalls: 2 },
      durationMs: 2500,
    });
  });

  it('takes the whole output it is given over the final event preview', () => {
    const run = caseRunOf(noteCase, eventsOf({ output: 'Release…[900 more characters]' }), {
      output: 'Release 1.2, whole',
    });
    expect(run.output).toBe('Release 1.2, whole');
  });

  it('gives no output for a failed task, and a cancelled one the time from its acceptance', () => {
    const failed = caseRunOf(noteCase, eventsOf({ ended: 'failed', durationMs: 700 }));
    expect(failed).toMatchObject({ status: 'failed', output: undefined, durationMs: 700 });
    const events = eventsOf({ ended: 'cancelled' });
    const cancelled = caseRunOf(noteCase, events);
    const span = Date.parse(events.at(-1)?.ts ?? '') - Date.parse(events[0]?.ts ?? '');
    expect(cancelled).toMatchObject({ status: 'cancelled', output: undefined, durationMs: span });
    expect(span).toBeGreaterThan(0);
  });

  it("leaves out other tasks' events, a sub-task's among them, and counts an event seen twice once", () => {
    const own = eventsOf({ tools: ['write_file'] });
    const child = eventsOf({ taskId: 'child', tools: ['run_command'] }).map((event) =>
      event.kind === 'task.accepted'
        ? {
            ...event,
            data: { ...event.data, parent: { taskId: 't1', pipeline: 'notes', step: 's', depth: 1 } },
          }
        : event,
    );
    const [accepted, ...rest] = own as [TroupeEvent, ...TroupeEvent[]];
    const run = caseRunOf(noteCase, [...child.slice(0, 3), accepted, accepted, ...child.slice(3), ...rest]);
    expect(run.taskId).toBe('t1');
    expect(run.events).toHaveLength(own.length);
    expect(run.events.filter((event) => event.kind === 'tool.call').map((event) => event.data)).toMatchObject(
      [{ tool: 'write_file' }],
    );
  });

  it('throws, naming the case and the task, when the task has not ended', () => {
    const events = eventsOf({}).filter((event) => event.kind !== 'task.completed');
    expect(() => caseRunOf(noteCase, events)).toThrow(
      /case note-1: task t1 has no final event \(task.completed, task.failed or task.cancelled\)/,
    );
    expect(() => caseRunOf(noteCase, [])).toThrow('case note-1: the run has no events');
  });
});
