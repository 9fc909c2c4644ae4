export { createLogger, type Logger, type LoggerOptions, REDACT_PATHS, REDACTED } from './logger.ts';
export {
  logMessage,
  logRefusedMessage,
  type MessageLogFields,
  type MessageLogLevel,
  type MessageMeta,
  messageLogFields,
  messageLogLine,
  type RefusalDetails,
  replyMeta,
} from './messageLog.ts';
