/** The gateway's wire shapes: its HTTP bodies, WebSocket messages, and what it keeps in NATS of its own. */

export { PushCursor, PushDeliveryState, StoredPushConfig } from './a2aPush.ts';
export {
  AllEventsQuery,
  ApprovalList,
  ApprovalsQuery,
  CancelBody,
  CancelResult,
  ClientTask,
  DecisionBody,
  DecisionResult,
  ErrorBody,
  EventsQuery,
  FamilyResult,
  ForkBody,
  Health,
  NoMoreEvents,
  OpenSessionBody,
  PauseBody,
  PauseResult,
  PipelineList,
  PipelineParams,
  ReadyQuery,
  RequestParams,
  RestartBody,
  ResumeBody,
  ResumeResult,
  SessionList,
  SessionListQuery,
  SessionMessageBody,
  SessionParams,
  SessionView,
  SubmitBody,
  SubmitQuery,
  TaskList,
  TaskListQuery,
  TaskParams,
  TaskPaused,
  TaskQuery,
  TaskStatus,
  TaskTrace,
  TaskView,
  TellBody,
  TellResult,
  TokenInfo,
} from './httpApi.ts';
export { McpRoundState } from './mcpRoundState.ts';
export {
  CancelToolInput,
  GetToolInput,
  MAX_GET_WAIT_SECONDS,
  McpTaskState,
  startToolInput,
  TellToolInput,
  TellToolResult,
} from './mcpTools.ts';
export { SessionId, SessionRecord, SessionSummary, SessionSummaryWritten } from './sessionRecord.ts';
export { StoredVersionConfig } from './storedVersionConfig.ts';
export { TokenEntry, TokenScope, TokensFile } from './tokensFile.ts';
export { ClientMessage } from './webSocketMessages.ts';
export {
  FileParams,
  FileQuery,
  ListedWorkspaceFile,
  WorkspaceFileBytes,
  WorkspaceListing,
} from './workspaceFiles.ts';
