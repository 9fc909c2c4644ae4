import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging/logger.ts';
import {
  logMessage,
  logRefusedMessage,
  messageLogFields,
  messageLogLine,
  replyMeta,
} from '../../src/logging/messageLog.ts';

function capture(): { lines: Record<string, unknown>[]; destination: { write(line: string): void } } {
  const lines: Record<string, unknown>[] = [];
  return { lines, destination: { write: (line) => void lines.push(JSON.parse(line)) } };
}

describe('createLogger', () => {
  it('writes JSON lines with the given name and level', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ name: 'troupe-test', level: 'warn', destination });
    logger.info('hidden');
    logger.warn({ pipeline: 'demo' }, 'shown');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ name: 'troupe-test', level: 40, msg: 'shown', pipeline: 'demo' });
  });

  it('redacts secrets at the top level, one level down and in headers', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ destination });
    logger.info(
      {
        apiKey: 'sk-top',
        provider: { apiKey: 'sk-live-123', api_key: 'sk-snake', model: 'gpt' },
        user: { password: 'hunter2', token: 'tok', secret: 's', name: 'ann' },
        headers: { authorization: 'Bearer abc', accept: 'json' },
        request: { headers: { authorization: 'Bearer def' } },
      },
      'calling the model',
    );
    const text = JSON.stringify(lines[0]);
    for (const secret of [
      'sk-top',
      'sk-live-123',
      'sk-snake',
      'hunter2',
      '"tok"',
      '"s"',
      'Bearer abc',
      'Bearer def',
    ]) {
      expect(text).not.toContain(secret);
    }
    expect(lines[0]).toMatchObject({
      apiKey: '[redacted]',
      provider: { apiKey: '[redacted]', api_key: '[redacted]', model: 'gpt' },
      user: { password: '[redacted]', name: 'ann' },
      headers: { authorization: '[redacted]', accept: 'json' },
      request: { headers: { authorization: '[redacted]' } },
    });
  });

  it('writes a key a child logger binds once, though the call gives it again', () => {
    const raw: string[] = [];
    const logger = createLogger({ destination: { write: (line) => void raw.push(line) } });
    const child = logger.child({ pipeline: 'demo' });
    child.info({ pipeline: 'demo', consumer: 'troupe-tasks-demo' }, 'pipeline is taking tasks');
    child.warn({ taskId: 't1', pipeline: 'demo' }, 'task id already submitted');
    child.info('no fields');
    expect(raw).toHaveLength(3);
    for (const line of raw) expect(line.match(/"pipeline":/g)).toHaveLength(1);
    expect(JSON.parse(raw[0] ?? '')).toMatchObject({ pipeline: 'demo', consumer: 'troupe-tasks-demo' });
  });
});

describe('message log lines', () => {
  it('has direction, subject and only the known message fields', () => {
    expect(messageLogFields('out', 'troupe.tasks.demo')).toEqual({
      dir: 'out',
      subject: 'troupe.tasks.demo',
    });
    expect(
      messageLogFields('in', 'troupe.events.demo.t1.agent.handoff', {
        taskId: 't1',
        from: 'planner',
        to: 'executor',
        kind: 'agent.handoff',
      }),
    ).toEqual({
      dir: 'in',
      subject: 'troupe.events.demo.t1.agent.handoff',
      taskId: 't1',
      from: 'planner',
      to: 'executor',
      kind: 'agent.handoff',
    });
    expect(messageLogLine('out', 'troupe.events.demo.t1.task.accepted')).toBe(
      '→ troupe.events.demo.t1.task.accepted',
    );
    expect(messageLogLine('in', 'troupe.tasks.demo')).toBe('← troupe.tasks.demo');
  });

  it('writes one line at the chosen level', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ level: 'debug', destination });
    logMessage(logger, 'debug', 'in', 'troupe.control.t1', { taskId: 't1' });
    expect(lines).toEqual([
      expect.objectContaining({
        level: 20,
        dir: 'in',
        subject: 'troupe.control.t1',
        taskId: 't1',
        msg: '← troupe.control.t1',
      }),
    ]);
  });

  it('writes a refused message as one warning with its reason', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ destination });
    logRefusedMessage(logger, 'troupe.tasks.nope', 'no pipeline named "nope" is loaded', {
      meta: { from: 'user', to: 'nope', kind: 'task' },
    });
    expect(lines).toEqual([
      expect.objectContaining({
        level: 40,
        dir: 'in',
        subject: 'troupe.tasks.nope',
        from: 'user',
        to: 'nope',
        kind: 'task',
        reason: 'no pipeline named "nope" is loaded',
        msg: '← troupe.tasks.nope refused: no pipeline named "nope" is loaded',
      }),
    ]);
  });

  it('labels a reply from the responder to the requester, with a reply kind', () => {
    expect(replyMeta({ taskId: 't1', from: 'workflow', to: 'planner', kind: 'agent.step' })).toEqual({
      taskId: 't1',
      from: 'planner',
      to: 'workflow',
      kind: 'agent.reply',
    });
    // A step handed on by another agent is still asked for, and answered to, by the workflow.
    expect(replyMeta({ taskId: 't1', from: 'planner', to: 'executor', kind: 'agent.step' })).toMatchObject({
      from: 'executor',
      to: 'workflow',
    });
    expect(replyMeta({ taskId: 't1', from: 'human', to: 'executor', kind: 'approval' })).toEqual({
      taskId: 't1',
      from: 'executor',
      to: 'human',
      kind: 'approval.reply',
    });
    // Who answers, when the request does not say whom it was for.
    expect(replyMeta({ taskId: 't1', from: 'user', kind: 'cancel' }, 'coordinator')).toEqual({
      taskId: 't1',
      from: 'coordinator',
      to: 'user',
      kind: 'cancel.reply',
    });
    expect(replyMeta({})).toEqual({ kind: 'reply' });
  });
});
