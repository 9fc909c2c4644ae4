import { createLogger, type Logger } from '@troupe/runtime';

/** One JSON log line, parsed. */
export type LogLine = Record<string, unknown> & { level: number; msg: string };

/** A JSON logger whose lines land in `lines`, parsed, for tests that assert on what was logged. */
export function captureLogger(level = 'debug'): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = createLogger({
    level,
    name: 'test',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) },
  });
  return { logger, lines };
}
