export {
  COMPARE_RESAMPLES,
  COMPARE_SEED,
  caseMeanScore,
  compareExperiments,
  meanScoreFell,
} from './evalCompare.ts';
export { EvalStore, type NewDataset } from './evalStore.ts';
export {
  type DecidedStatus,
  type HumanReply,
  listHumanRequests,
  type ReplyOutcome,
  type RequestScope,
  readHumanRequest,
  replyToHuman,
} from './humanRequests.ts';
export { OperationError, type OperationErrorCode } from './operationError.ts';
export { type OriginAsked, type OriginAskedFrom, originAsked } from './originAsked.ts';
export { PipelineRegistry } from './pipelineRegistry.ts';
export {
  cancelQueued,
  openQueuedStore,
  type QueuedStore,
  readQueued,
  takeQueued,
} from './queuedTasks.ts';
export {
  type Chosen,
  journalKeysOf,
  mergeCases,
  type RecordedCases,
  type RecordedSelect,
  recordedCases,
  type SkippedTask,
  tasksToRecord,
} from './recordedCases.ts';
export {
  firstStarted,
  type ReusedStep,
  type ReusedSteps,
  type ReusePlan,
  reuseKey,
  reusePlan,
} from './reusedSteps.ts';
export { type ReusedWorkspace, reusedWorkspace, workspaceOnVersion } from './reusedWorkspace.ts';
export { lastStepEnds } from './stepEnds.ts';
export {
  eventsAfter,
  type FollowOptions,
  followAllEvents,
  followTaskEnding,
  followTaskEvents,
  type SequencedEvent,
} from './storedEvents.ts';
export { type SubTaskReader, subTaskReader, withSubTasks } from './subTaskTraces.ts';
export {
  type FamilySubmitOptions,
  type FamilyTask,
  type ForkOptions,
  forkTask,
  type RestartOptions,
  restartTask,
} from './taskFamily.ts';
export {
  cancelTask,
  migrateTask,
  pauseTask,
  readTask,
  readTaskEvents,
  resumeTask,
  type SteerOptions,
  type SubmitOptions,
  type SubmitResult,
  type Submitted,
  submitTask,
  submitToPipeline,
  tellTask,
  withStoredInput,
} from './taskOperations.ts';
export {
  type ApprovalTrace,
  type BranchesJoinNode,
  buildTaskTrace,
  type CompactionTrace,
  type FlowNode,
  type FlowPlace,
  type HandoffNode,
  type ItemsJoinNode,
  type ModelCallTrace,
  type ModelSpend,
  type QuestionTrace,
  type RouteNode,
  type SkipNode,
  type StepNode,
  type StepTrace,
  type TaskTrace,
  type ToolCallTrace,
  type TraceEntry,
  type TraceTotals,
  wholeTrace,
} from './taskTrace.ts';
export {
  type ClientOptions,
  type ConnectOptions,
  type Decided,
  type EventsOptions,
  type NewTask,
  type TaskResult,
  TroupeClient,
  type WaitOptions,
} from './troupeClient.ts';
export {
  bucketIfAny,
  CLIENT_WAIT,
  type HumanRequestStore,
  openBucket,
  openHumanRequests,
  openWorkflowStore,
  readValues,
  type WorkflowStore,
  workflowStoreIfAny,
} from './troupeState.ts';
