export type { Span as TraceSpan } from '@opentelemetry/api';
export type { AgentDefinition } from './agent/agentDefinition.ts';
export { type AgentHost, type AgentHostOptions, startAgentHost } from './agent/agentHost.ts';
export {
  type AgentEmitted,
  type AgentFailure,
  type AgentMachineInput,
  type AgentOutput,
  type AgentServices,
  type ApprovalAsk,
  agentMachine,
  type CallDecision,
  type ModelCallInput,
  type ModelCallOutput,
  type OutputSpec,
  type StepStop,
} from './agent/agentMachine.ts';
export { type AgentStep, runAgentStep, type StepDeps, startAgentStep } from './agent/agentStep.ts';
export { AgentStepError, type AgentStepErrorCode } from './agent/agentStepError.ts';
export { type DeltaBatch, DeltaBatcher, type DeltaBatcherOptions } from './agent/deltaBatcher.ts';
export { taskWorkspace } from './agent/journaledTools.ts';
export {
  type LocalRequestOptions,
  type LocalStepCall,
  type LocalStepHooks,
  type LocalSteps,
  requestLocally,
} from './agent/localSteps.ts';
export { type HostedAgent, isRemoteAgent, type RemoteAgent } from './agent/remoteAgent.ts';
export { SESSION_SUMMARY_TIMEOUT_MS, sessionSummaryMessages } from './agent/sessionSummary.ts';
export { buildStepMessages, buildTaskText, VERDICT_INSTRUCTIONS } from './agent/stepPrompt.ts';
export { failedReply } from './agent/stepReply.ts';
export { stepTimeoutError } from './agent/stepTimeout.ts';
export { offloadReply, unreadContextReply, withWholeContext } from './agent/stepValues.ts';
export { parseStructured, parseVerdict } from './agent/structuredReply.ts';
export { holdTaskRequests, type RequestsHold } from './approvals/heldRequests.ts';
export {
  type HumanGate,
  type HumanScope,
  NatsHumanGate,
  type NatsHumanGateOptions,
  type WaitingOn,
} from './approvals/humanGate.ts';
export { StepTimedOutError } from './approvals/stepTimedOutError.ts';
export {
  closedByEnding,
  closeTaskRequests,
  describeEnding,
  endingOf,
  TaskEndedError,
} from './approvals/taskEnded.ts';
export { type CallerCheckpoint, CheckpointNotStoredError } from './durable/callerCheckpoint.ts';
export { type EventHistoryOptions, readEventHistory, type StoredEvent } from './durable/eventHistory.ts';
export {
  isOutage,
  type KeyValue,
  type KvEntry,
  KvStore,
  throughOutages,
  underPrefix,
} from './durable/kvStore.ts';
export { MemoryKv } from './durable/memoryKv.ts';
export { JournalRecord, NewerJournalRecordError } from './durable/newerJournalRecord.ts';
export {
  JournalEntry,
  type JournalValues,
  MAX_RECORD_BYTES,
  type RecordedTurn,
  type RemoteCallRecord,
  StepJournal,
  type ToolCallRecord,
} from './durable/stepJournal.ts';
export {
  OFFLOAD_BYTES,
  type Offloaded,
  PREVIEW_BYTES,
  previewOf,
  ValueStore,
  type ValueStoreOptions,
} from './durable/valueStore.ts';
export { ValueStoreError, type ValueStoreErrorCode } from './durable/valueStoreError.ts';
export {
  addWork,
  ensureWorkQueue,
  type WorkItem,
  WorkQueue,
  type WorkQueueSpec,
} from './durable/workQueue.ts';
export { type Clock, every, newTraceparent, sleep, systemClock, timeoutSignal } from './events/clock.ts';
export {
  EventFactory,
  type EventFactoryOptions,
  type EventRoute,
  type EventScope,
  eventId,
  preview,
} from './events/eventFactory.ts';
export * from './logging/index.ts';
export {
  forgetSecrets,
  redactDeep,
  redactSecrets,
  registerSecret,
  registerSecretsFromEnv,
} from './logging/secrets.ts';
export { mapLimit } from './mapLimit.ts';
export * from './mcp/index.ts';
export { KvMemory, type MemoryOwner, type MemoryScope, type MemoryView } from './memory/memoryStore.ts';
export { type ConnectionState, type JetStreamProbe, probeJetStream } from './telemetry/jetStreamProbe.ts';
export { type MetricsServer, parseListen, serveMetrics, TroupeMetrics } from './telemetry/metrics.ts';
export {
  capturesContent,
  contextOf,
  endSpan,
  startChildSpan,
  startClientSpan,
  startTracing,
  startWorkflowSpan,
  type Tracing,
  type TracingOptions,
  traceparentOf,
} from './telemetry/tracing.ts';
export { askHumanTool } from './tools/askHumanTool.ts';
export * from './tools/index.ts';
export { recallTool, rememberTool } from './tools/memoryTools.ts';
export { utf8Head } from './tools/truncateOutput.ts';
export * from './transport/index.ts';
export { type WithTimeoutOptions, withTimeout } from './withTimeout.ts';
export {
  WorkspaceFileError,
  type WorkspaceFileErrorCode,
} from './workspace/workspaceFileError.ts';
export {
  DEFAULT_LISTING_MAX_FILES,
  listWorkspaceFiles,
  type OmittedReason,
  type OpenedWorkspaceFile,
  openWorkspaceFile,
  type WorkspaceFileEntry,
  type WorkspaceListing,
} from './workspace/workspaceFiles.ts';
export {
  DEFAULT_WORKSPACE_LIMITS,
  WorkspaceLimitError,
  type WorkspaceLimits,
  workspaceLimitsFromEnv,
} from './workspace/workspaceLimits.ts';
export { scanWorkspace, type WorkspaceScan } from './workspace/workspaceScan.ts';
export { WorkspaceSync, type WorkspaceSyncOptions } from './workspace/workspaceSync.ts';
