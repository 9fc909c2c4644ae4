export { NAME_PATTERN, TASK_ID_PATTERN, Name, TaskId, isName, isTaskId } from './names.ts';
export { ROOT, STREAMS, BUCKETS, subjects, parseSubject, type ParsedSubject } from './subjects.ts';
export { TaskSubmission } from './task.ts';
export { UsageTotals, emptyUsage, sumUsage } from './usage.ts';
export {
  Verdict,
  StepOutput,
  StepExpect,
  AgentStepRequest,
  StepError,
  AgentStepReply,
} from './step.ts';
export { ApprovalDecision, ControlMessage, ErrorReply } from './control.ts';
export {
  EventData,
  EVENT_KINDS,
  FINAL_EVENT_KINDS,
  TroupeEvent,
  InvalidMessageEvent,
  type EventKind,
  type EventOf,
} from './events.ts';
export { parseMessage, formatIssues, formatPath, type Issue, type ParseResult } from './parse.ts';
