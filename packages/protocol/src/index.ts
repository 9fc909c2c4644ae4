export {
  ApprovalDecision,
  ControlMessage,
  ControlReceipt,
  ControlRefusal,
  DecisionReceipt,
  ErrorReply,
  HumanAnswer,
  HumanRequest,
  MAX_TOLD_KEYS,
  TaskEnding,
} from './control.ts';
export {
  CaseChange,
  CaseComparison,
  CaseSide,
  ComparedExperiment,
  EvalComparison,
  EvalVerdict,
  ScorerComparison,
} from './evalComparison.ts';
export {
  CaseRecording,
  CaseResult,
  Dataset,
  DatasetSummary,
  EVALS_BUCKET,
  EvalCase,
  EvalMode,
  Experiment,
  ExperimentSummary,
  Score,
  ScorerSpec,
  TrajectoryMatch,
} from './evals.ts';
export {
  EVENT_BATCH_TOKEN,
  EventBatch,
  EventMessage,
  eventsIn,
  eventsOf,
  isBatchable,
} from './eventBatch.ts';
export { onItsSubject, parseEvent } from './eventSubject.ts';
export {
  EVENT_KINDS,
  EventData,
  type EventKind,
  type EventOf,
  FINAL_EVENT_KINDS,
  InvalidMessageEvent,
  TroupeEvent,
} from './events.ts';
export {
  errorMessage,
  isRetryable,
  isStepErrorCode,
  StepErrorCode,
  type StepFailureSource,
  TaskFailureReason,
  taskFailureReason,
} from './failure.ts';
export * from './gateway/index.ts';
export { checkTaskInput } from './inputSchema.ts';
export { JournalEntry, ToolResultRecord } from './journalEntry.ts';
export { ConversationSummary, ModelReply, TokenUsage } from './modelReply.ts';
export { isName, isTaskId, NAME_PATTERN, Name, TASK_ID_PATTERN, TaskId } from './names.ts';
export {
  decodeMessage,
  exceedsDepth,
  formatIssues,
  formatPath,
  type Issue,
  MAX_MESSAGE_DEPTH,
  type ParseLimits,
  type ParseResult,
  parseMessage,
  validateMessage,
} from './parse.ts';
export { FlowGraph, PipelineRegistration } from './pipelineRegistration.ts';
export { PipelineVersion, VersionHash } from './pipelineVersion.ts';
export { QUEUED_MARK_HEADER, QueuedTask } from './queuedTask.ts';
export { HomeLock, ServerRecord } from './serverRecord.ts';
export { SessionSummaryReply, SessionSummaryRequest, SessionTurn } from './session.ts';
export {
  AgentStepReply,
  AgentStepRequest,
  MAX_TIMER_MS,
  MIN_HEARTBEAT_MS,
  StepBudget,
  StepError,
  StepExpect,
  StepHeartbeat,
  StepOutput,
  ToldMessage,
  Verdict,
} from './step.ts';
export {
  A2A_PUSH_QUEUE,
  BUCKETS,
  type ParsedSubject,
  parseSubject,
  ROOT,
  STREAMS,
  subjects,
} from './subjects.ts';
export {
  MAX_PIPELINE_DEPTH,
  originRef,
  TaskFields,
  TaskOrigin,
  TaskOriginRef,
  TaskParent,
  TaskSubmission,
} from './task.ts';
export {
  checkTaskToSubmit,
  DEFAULT_TASK_LIMITS,
  MAX_TASK_DEPTH,
  parseStoredInput,
  parseTask,
  type TaskLimits,
} from './taskLimits.ts';
export { ToolDecision, ToolResult } from './toolResult.ts';
export { emptyUsage, sumUsage, UsageTotals } from './usage.ts';
export { fillInput, InputCut, inputBucket, inputObjectPrefix, ValueRef, valueBucket } from './valueRef.ts';
export { endingOfRecord, StepActivity, WorkflowRecord } from './workflowRecord.ts';
export {
  applyWorkspaceChanges,
  carriedManifest,
  MAX_WORKSPACE_FILES,
  noWorkspaceChanges,
  WorkspaceChanges,
  WorkspaceFile,
  WorkspaceManifest,
  WorkspacePath,
  workspaceDiff,
  workspaceObject,
  workspaceRef,
} from './workspace.ts';
