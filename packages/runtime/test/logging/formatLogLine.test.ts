import { describe, expect, it } from 'vitest';
import { formatLogLine } from '../../src/logging/formatLogLine.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { logMessage, logRefusedMessage, replyMeta } from '../../src/logging/messageLog.ts';

const plain = { color: false, stacks: false };
/** 2026-03-04 05:06:07.089, local time. */
const time = new Date(2026, 2, 4, 5, 6, 7, 89).getTime();

/** A pretty logger whose output lands in `text`, as written. */
function prettyCapture(level = 'info'): { logger: ReturnType<typeof createLogger>; text: () => string } {
  const chunks: string[] = [];
  const logger = createLogger({
    level,
    pretty: true,
    destination: { write: (chunk) => void chunks.push(chunk) },
  });
  return { logger, text: () => chunks.join('') };
}

describe('formatLogLine', () => {
  it('writes a message line like a line of troupe tail: time, level, task, from → to, kind, message', () => {
    const line = formatLogLine(
      {
        level: 30,
        time,
        pid: 1,
        hostname: 'h',
        dir: 'out',
        subject: 'troupe.agents.demo.planner',
        taskId: 't1',
        from: 'workflow',
        to: 'planner',
        kind: 'agent.step',
        msg: '→ troupe.agents.demo.planner',
      },
      plain,
    );
    expect(line).toBe(
      `05:06:07.089  INFO   t1  ${'workflow → planner'.padEnd(30)}  ${'agent.step'.padEnd(16)}  → troupe.agents.demo.planner`,
    );
  });

  it('writes any other line as time, level, message and its other fields, leaving out what the message says', () => {
    const line = formatLogLine(
      {
        level: 30,
        time,
        pid: 1,
        hostname: 'h',
        name: 'troupe',
        server: '127.0.0.1:4222',
        client: 'troupe-coordinator',
        streams: ['TASKS', 'EVENTS'],
        note: 'two words',
        msg: 'connected to NATS at 127.0.0.1:4222',
      },
      plain,
    );
    expect(line).toBe(
      '05:06:07.089  INFO   connected to NATS at 127.0.0.1:4222  client=troupe-coordinator  streams=["TASKS","EVENTS"]  note="two words"',
    );
  });

  it('gives an error its message and code on the same line, and its stack only when asked to', () => {
    const record = {
      level: 50,
      time,
      err: {
        type: 'Error',
        message: 'socket hang up',
        stack: 'Error: socket hang up\n    at call (x.ts:1:1)',
        code: 'ECONNRESET',
      },
      subject: 'troupe.x',
      msg: 'cannot publish an event; the task goes on',
    };
    const line = formatLogLine(record, plain);
    expect(line).toBe(
      '05:06:07.089  ERROR  cannot publish an event; the task goes on  error="socket hang up"  subject=troupe.x  code=ECONNRESET',
    );
    expect(line).not.toContain('\n');
    const withStack = formatLogLine(record, { color: false, stacks: true });
    expect(withStack.split('\n')).toEqual([line, '    Error: socket hang up', '        at call (x.ts:1:1)']);
  });

  it('does not repeat an error message the line already says, and keeps a multi-line message on one line', () => {
    const line = formatLogLine(
      { level: 50, time, err: { message: 'boom' }, msg: 'handler for troupe.x failed: boom\nand more' },
      plain,
    );
    expect(line).toBe('05:06:07.089  ERROR  handler for troupe.x failed: boom ↵ and more');
  });
});

describe('createLogger with pretty output', () => {
  it('writes one line per record: messages, refusals and errors alike', () => {
    const { logger, text } = prettyCapture();
    const step = { taskId: 't1', from: 'workflow', to: 'planner', kind: 'agent.step' };
    logMessage(logger, 'info', 'out', 'troupe.agents.demo.planner', step);
    logMessage(logger, 'info', 'in', 'troupe._inbox.x1', replyMeta(step));
    logRefusedMessage(logger, 'troupe.tasks.demo', 'payload is not JSON', { meta: { kind: 'task' } });
    logger.error({ err: new Error('boom') }, 'handler failed');
    const lines = text().trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(
      / INFO {3}t1 {2}workflow → planner +agent\.step +→ troupe\.agents\.demo\.planner$/,
    );
    expect(lines[1]).toMatch(/ INFO {3}t1 {2}planner → workflow +agent\.reply +← troupe\._inbox\.x1$/);
    expect(lines[2]).toMatch(
      / WARN {3}· {2}· → · +task +← troupe\.tasks\.demo refused: payload is not JSON$/,
    );
    expect(lines[3]).toMatch(/ ERROR {2}handler failed {2}error=boom$/);
  });

  it('prints stacks at debug', () => {
    const { logger, text } = prettyCapture('debug');
    logger.error({ err: new Error('boom') }, 'handler failed');
    expect(text()).toMatch(/error=boom\n {4}Error: boom\n {8}at /);
  });

  it('still redacts secrets', () => {
    const { logger, text } = prettyCapture();
    logger.warn(
      {
        apiKey: 'sk-top',
        provider: { apiKey: 'sk-live-123', model: 'gpt' },
        headers: { authorization: 'Bearer abc' },
        request: { headers: { authorization: 'Bearer def' } },
      },
      'calling the model',
    );
    const written = text();
    for (const secret of ['sk-top', 'sk-live-123', 'Bearer abc', 'Bearer def']) {
      expect(written).not.toContain(secret);
    }
    expect(written).toContain('[redacted]');
    expect(written).toContain('"model":"gpt"');
  });

  it('colours only when told to', () => {
    const chunks: string[] = [];
    const logger = createLogger({
      pretty: true,
      color: true,
      destination: { write: (chunk) => void chunks.push(chunk) },
    });
    logger.warn('careful');
    expect(chunks.join('')).toContain('\u001b[');
    const { logger: bare, text } = prettyCapture();
    bare.warn('careful');
    expect(text()).not.toContain('\u001b[');
  });
});
