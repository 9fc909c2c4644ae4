export { createLogger, type Logger, type LoggerOptions, REDACT_PATHS, REDACTED } from './logger.ts';
export {
  logMessage,
  type MessageLogFields,
  type MessageLogLevel,
  type MessageMeta,
  messageLogFields,
  messageLogLine,
} from './messageLog.ts';
