import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging/logger.ts';
import { logMessage, messageLogFields, messageLogLine } from '../../src/logging/messageLog.ts';

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

  it('falls back to JSON when pretty output is asked for but a destination is all there is', () => {
    const logger = createLogger({ pretty: true, level: 'silent' });
    expect(() => logger.info('nothing')).not.toThrow();
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
});
