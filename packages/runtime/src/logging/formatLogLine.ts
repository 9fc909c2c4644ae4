import { styleText } from 'node:util';
import type pino from 'pino';

type Style = Parameters<typeof styleText>[0];

export interface LogLineFormatOptions {
  /** ANSI colours, for a terminal that takes them. */
  color: boolean;
  /** Print an error's stack on the lines below its line (at levels `debug` and `trace`); else its message only. */
  stacks: boolean;
}

const LEVELS: Partial<Record<number, { label: string; style: Style }>> = {
  10: { label: 'TRACE', style: 'gray' },
  20: { label: 'DEBUG', style: 'blue' },
  30: { label: 'INFO', style: 'green' },
  40: { label: 'WARN', style: 'yellow' },
  50: { label: 'ERROR', style: 'red' },
  60: { label: 'FATAL', style: ['red', 'bold'] },
};

/** Keys a line shows in places of their own, or not at all. */
const OWN_PLACE = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'err']);
/** The same for a message's line, whose task, route and kind have columns. */
const MESSAGE_OWN_PLACE = new Set([...OWN_PLACE, 'dir', 'subject', 'taskId', 'from', 'to', 'kind']);
/** Characters of a value shown after its key; the JSON line has it all. */
const MAX_VALUE = 120;

/**
 * One readable line for one pino record. A message sent or received (it has `dir` and `subject`) reads like a line
 * of `troupe tail`: time, level, task, from → to, kind, and its message (`→ <subject>`, or why it was refused).
 * Any other line: time, level, message, then its other fields as `key=value` (those the message already says
 * left out). An error adds its message when the line does not say it, and its stack only when `stacks` is set.
 *
 * @example
 * formatLogLine({ level: 30, time, dir: 'out', subject: 'troupe.agents.demo.planner', taskId: 't1',
 *   from: 'workflow', to: 'planner', kind: 'agent.step', msg: '→ troupe.agents.demo.planner' }, options);
 * // 14:02:07.131  INFO   t1  workflow → planner              agent.step        → troupe.agents.demo.planner
 */
export function formatLogLine(record: Record<string, unknown>, options: LogLineFormatOptions): string {
  const paint = (style: Style | undefined, text: string) =>
    // Whether to colour is decided here (the lines may go to a stream that is not stdout).
    options.color && style !== undefined ? styleText(style, text, { validateStream: false }) : text;
  const level = LEVELS[Number(record.level)];
  const msg = oneLine(String(record.msg ?? ''));
  const message = typeof record.dir === 'string' && typeof record.subject === 'string';
  const columns = [
    paint('gray', clockTime(record.time)),
    paint(level?.style, (level?.label ?? String(record.level)).padEnd(5)),
  ];
  if (message) {
    const route = `${text(record.from) ?? '·'} → ${text(record.to) ?? '·'}`;
    columns.push(
      paint('gray', text(record.taskId) ?? '·'),
      route.padEnd(30),
      (text(record.kind) ?? '').padEnd(16),
    );
  }
  columns.push(msg);
  const pairs = keyValues(record, message ? MESSAGE_OWN_PLACE : OWN_PLACE, msg);
  const error = errorOf(record.err);
  if (error?.message && !msg.includes(error.message)) pairs.unshift(`error=${value(error.message)}`);
  if (error?.code !== undefined) pairs.push(`code=${value(error.code)}`);
  const line = [...columns, ...pairs.map((pair) => paint('dim', pair))].join('  ');
  if (!options.stacks || error?.stack === undefined) return line;
  return `${line}\n${error.stack.replace(/^/gm, '    ')}`;
}

/**
 * A pino destination that writes each record as one line (see {@link formatLogLine}) to `target`; what is not
 * a JSON record passes through as it is.
 */
export function oneLineStream(
  target: pino.DestinationStream,
  options: LogLineFormatOptions,
): pino.DestinationStream {
  return {
    write(line: string): void {
      let record: unknown;
      try {
        record = JSON.parse(line);
      } catch {
        target.write(line);
        return;
      }
      if (typeof record !== 'object' || record === null) {
        target.write(line);
        return;
      }
      target.write(`${formatLogLine(record as Record<string, unknown>, options)}\n`);
    },
  };
}

/** `HH:MM:SS.mmm` in local time, as a terminal log reads best. */
function clockTime(time: unknown): string {
  if (typeof time !== 'number') return String(time ?? '');
  const at = new Date(time);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}.${String(at.getMilliseconds()).padStart(3, '0')}`;
}

/** The `key=value` pairs of the fields without a place of their own, but for strings the message already says. */
function keyValues(record: Record<string, unknown>, ownPlace: ReadonlySet<string>, msg: string): string[] {
  const pairs: string[] = [];
  for (const [key, field] of Object.entries(record)) {
    if (ownPlace.has(key) || field === undefined) continue;
    if (typeof field === 'string' && msg.includes(field)) continue;
    pairs.push(`${key}=${value(field)}`);
  }
  return pairs;
}

/** A value as it reads after `key=`: a plain word as it is, anything else as JSON, cut short. */
function value(field: unknown): string {
  const shown =
    typeof field === 'string' && /^[^\s"=]+$/.test(field) ? field : (JSON.stringify(field) ?? String(field));
  return shown.length > MAX_VALUE ? `${shown.slice(0, MAX_VALUE - 1)}…` : shown;
}

function text(field: unknown): string | undefined {
  return typeof field === 'string' && field !== '' ? field : undefined;
}

function oneLine(msg: string): string {
  return msg.replace(/\s*\n\s*/g, ' ↵ ');
}

/** pino's serialized error: `{ type, message, stack, code?, … }`. */
function errorOf(err: unknown): { message?: string; stack?: string; code?: unknown } | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { message, stack, code } = err as Record<string, unknown>;
  return {
    ...(typeof message === 'string' && message !== '' ? { message: oneLine(message) } : {}),
    ...(typeof stack === 'string' ? { stack } : {}),
    ...(code === undefined ? {} : { code }),
  };
}
