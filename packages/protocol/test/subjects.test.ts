import { describe, expect, it } from 'vitest';
import { BUCKETS, type ParsedSubject, parseSubject, ROOT, STREAMS, subjects } from '../src/index.ts';

describe('subjects', () => {
  it('builds every subject under the troupe root', () => {
    expect(ROOT).toBe('troupe');
    expect(subjects.task('demo')).toBe('troupe.tasks.demo');
    expect(subjects.allTasks).toBe('troupe.tasks.>');
    expect(subjects.agent('demo', 'planner')).toBe('troupe.agents.demo.planner');
    expect(subjects.event('demo', 'task-1', 'step.started')).toBe('troupe.events.demo.task-1.step.started');
    expect(subjects.taskEvents('task-1')).toBe('troupe.events.*.task-1.>');
    expect(subjects.taskEvents('task-1', 'demo')).toBe('troupe.events.demo.task-1.>');
    expect(subjects.pipelineEvents('demo')).toBe('troupe.events.demo.*.>');
    expect(subjects.allEvents).toBe('troupe.events.>');
    expect(subjects.invalid).toBe('troupe.events._invalid');
    expect(subjects.approval('demo', 'task-1', 'ap-2')).toBe('troupe.approvals.demo.task-1.ap-2');
    expect(subjects.pipelineApprovals('demo')).toBe('troupe.approvals.demo.*.*');
    expect(subjects.control('task-1')).toBe('troupe.control.task-1');
    expect(subjects.steer('demo', 'task-1')).toBe('troupe.steer.demo.task-1');
    expect(subjects.pipelineSteer('demo')).toBe('troupe.steer.demo.*');
    expect(subjects.inboxPrefix).toBe('troupe._inbox');
  });

  it('names the streams and buckets Troupe owns', () => {
    expect(STREAMS).toEqual({ tasks: 'TASKS', events: 'EVENTS', deadLetters: 'DEADLETTER' });
    expect(BUCKETS).toEqual({
      workflows: 'workflows',
      memory: 'memory',
      pipelines: 'pipelines',
      approvals: 'approvals',
      journal: 'journal',
      sessions: 'sessions',
      versions: 'versions',
      queued: 'queued',
      a2aPush: 'a2a-push',
    });
  });
});

describe('parseSubject', () => {
  const roundTrips: [string, string, ParsedSubject][] = [
    ['task', subjects.task('demo'), { type: 'task', pipeline: 'demo' }],
    [
      'agent',
      subjects.agent('code-review', 'planner'),
      { type: 'agent', pipeline: 'code-review', agent: 'planner' },
    ],
    [
      'session summary',
      subjects.sessionSummary('code-review', 'planner'),
      { type: 'session-summary', pipeline: 'code-review', agent: 'planner' },
    ],
    [
      'event with a dotted kind',
      subjects.event('demo', 'Task_1', 'task.completed'),
      { type: 'event', pipeline: 'demo', taskId: 'Task_1', kind: 'task.completed' },
    ],
    [
      'event with a one-token kind',
      subjects.event('demo', 'task-1', 'ping'),
      { type: 'event', pipeline: 'demo', taskId: 'task-1', kind: 'ping' },
    ],
    ['invalid-message report', subjects.invalid, { type: 'invalid' }],
    [
      'approval',
      subjects.approval('demo', 'task-1', 'ap_2'),
      { type: 'approval', pipeline: 'demo', taskId: 'task-1', approvalId: 'ap_2' },
    ],
    ['control', subjects.control('task-1'), { type: 'control', taskId: 'task-1' }],
    ['steer', subjects.steer('demo', 'task-1'), { type: 'steer', pipeline: 'demo', taskId: 'task-1' }],
  ];

  it.each(roundTrips)('takes apart the %s subject its builder made', (_label, subject, parsed) => {
    expect(parseSubject(subject)).toEqual(parsed);
  });

  it('reads troupe.events._invalid as the invalid-message subject, not as an event', () => {
    expect(parseSubject('troupe.events._invalid')).toEqual({ type: 'invalid' });
  });

  it.each([
    ['an empty subject', ''],
    ['the root alone', 'troupe'],
    ['another root', 'other.tasks.demo'],
    ['a root in another case', 'Troupe.tasks.demo'],
    ['an unknown area', 'troupe.jobs.demo'],
    ['the inbox prefix', 'troupe._inbox.abc'],
  ])('refuses %s', (_label, subject) => {
    expect(parseSubject(subject)).toBeUndefined();
  });

  it.each([
    ['an upper-case pipeline', 'troupe.tasks.Demo'],
    ['an empty pipeline token', 'troupe.tasks.'],
    ['a wildcard pipeline', 'troupe.tasks.*'],
    ['an upper-case agent', 'troupe.agents.demo.Planner'],
    ['an upper-case event pipeline', 'troupe.events.Demo.task-1.step.started'],
    ['an underscore pipeline', 'troupe.events.my_pipe.task-1.step.started'],
    ['a bad event task id', 'troupe.events.demo.task*.step.started'],
    ['a bad approval id', 'troupe.approvals.demo.task-1.ap*'],
    ['an upper-case approval pipeline', 'troupe.approvals.Demo.task-1.ap-1'],
    ['a bad control task id', 'troupe.control.t>'],
  ])('refuses %s', (_label, subject) => {
    expect(parseSubject(subject)).toBeUndefined();
  });

  it('reads a dotted pipeline name as extra tokens and refuses it', () => {
    expect(parseSubject(subjects.task('my.pipe'))).toBeUndefined();
    expect(parseSubject(subjects.agent('my.pipe', 'planner'))).toBeUndefined();
  });

  it.each([
    ['a task subject without a pipeline', 'troupe.tasks'],
    ['a task subject with an extra token', 'troupe.tasks.demo.extra'],
    ['an agent subject without an agent', 'troupe.agents.demo'],
    ['an agent subject with an extra token', 'troupe.agents.demo.planner.extra'],
    ['a session-summary subject with an extra token', 'troupe.agents.demo.planner.summarize.more'],
    ['an event subject without a kind', 'troupe.events.demo.task-1'],
    ['an event subject with only a pipeline', 'troupe.events.demo'],
    ['an events subject with nothing after it', 'troupe.events'],
    ['the invalid subject with an extra token', 'troupe.events._invalid.more'],
    ['an approval subject without an approval id', 'troupe.approvals.demo.task-1'],
    ['an approval subject without a pipeline', 'troupe.approvals.task-1.ap-1'],
    ['an approval subject with an extra token', 'troupe.approvals.demo.task-1.ap-1.extra'],
    ['a control subject without a task id', 'troupe.control'],
    ['a control subject with an extra token', 'troupe.control.task-1.extra'],
    ['a steering subject without a task id', 'troupe.steer.demo'],
    ['a steering subject with a bad pipeline', 'troupe.steer.Demo!.task-1'],
  ])('refuses %s (wrong arity)', (_label, subject) => {
    expect(parseSubject(subject)).toBeUndefined();
  });
});
