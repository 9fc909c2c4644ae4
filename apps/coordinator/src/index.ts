export { a2aRemoteAgent } from './a2a/a2aRemoteAgent.ts';
export { contextIdOf } from './a2a/remoteStep.ts';
export { type AgentService, type AgentServiceOptions, startAgentService } from './agents/agentService.ts';
export { agentDefinitions, hostedAgents } from './config/agentDefinitions.ts';
export { builtinTools } from './config/builtinTools.ts';
export { ConfigError, type ConfigIssue, formatIssue } from './config/configError.ts';
export { suggestion } from './config/didYouMean.ts';
export { FLOW_END, flowGraph, flowMermaid } from './config/flowGraph.ts';
export { type LoadedPipeline, type LoadOptions, loadPipeline, parsePipeline } from './config/loadPipeline.ts';
export { pipelineJsonSchema } from './config/pipelineJsonSchema.ts';
export {
  AgentConfig,
  ModelConfig,
  PermissionRuleConfig,
  PipelineConfig,
  StepConfig,
} from './config/pipelineSchema.ts';
export { SHORT_VERSION, shortVersion } from './config/pipelineVersion.ts';
export type { RemoteAgentSettings } from './config/remoteAgents.ts';
export {
  type ImportModule,
  importWithNode,
  type ModuleTool,
  ToolModuleError,
  type ToolModuleErrorCode,
} from './config/toolModules.ts';
export { useVersion } from './config/useVersion.ts';
export {
  type Coordinator,
  type CoordinatorOptions,
  type PipelineReload,
  startCoordinator,
} from './coordinator.ts';
export { caseRunOf } from './evals/caseRun.ts';
export { type DatasetFile, DatasetFileError, readDatasetFile } from './evals/datasetFile.ts';
export { EvalsError, type EvalsErrorCode } from './evals/evalsError.ts';
export type { CaseRun, ScoreAnswer, ScoreContext, Scorer, ScorerModule } from './evals/evalTypes.ts';
export { experimentProblems } from './evals/experimentProblems.ts';
export { SCORE_WAIT_MARGIN_MS, sampled, scoreWaitMs } from './evals/onlineSampling.ts';
export {
  type RecordedCases,
  type RecordedSelect,
  recordedCases,
  type SkippedTask,
} from './evals/recordedCases.ts';
export { type RunCaseOptions, runCase } from './evals/runCase.ts';
export { type ExperimentOptions, runExperiment } from './evals/runExperiment.ts';
export { type MakeScorersOptions, makeScorers, scoreRun } from './evals/scoreCase.ts';
export { stepsRun, toolsCalled } from './evals/scorers/runFacts.ts';
export { type RunTaskOptions, type RunTaskResult, runTask } from './inProcessRun.ts';
export { deadLetter, type ExhaustedTask } from './intake/deadLetters.ts';
export {
  DEFAULT_INTAKE_LIMITS,
  type IntakeLimits,
  MAX_TASK_DEPTH,
} from './intake/intakeLimits.ts';
export { type MemoryDelivery, MemoryTaskIntake, type Settlement } from './intake/memoryTaskIntake.ts';
export {
  DEFAULT_MAX_IN_FLIGHT,
  HAND_BACK_DELAY_MS,
  natsTaskIntake,
  startTaskQueue,
  type TaskDelivery,
  type TaskIntake,
  type TaskQueue,
  type TaskQueueOptions,
  taskConsumerName,
} from './intake/taskQueue.ts';
export {
  accountsBlock,
  authorizationBlock,
  type ConfiguredUser,
  describeRole,
  inboxOf,
  isIdentityName,
  type Permissions,
  permissionsOf,
  type Role,
} from './nats/roles.ts';
export {
  type PipelineWatch,
  type PipelineWatchOptions,
  type ReloadOutcome,
  watchPipelines,
} from './pipelineWatch.ts';
export { Recording } from './replay/recording.ts';
export {
  type Divergence,
  factsOf,
  firstDivergence,
  type ReplayOptions,
  type ReplayResult,
  type RunFact,
  replayTask,
} from './replay/replayTask.ts';
export { HomeBusyError, readServerRecord } from './serverRecord.ts';
export {
  type HostOptions,
  type Service,
  type ServiceOptions,
  startService,
  startWorker,
  type Worker,
  type WorkerOptions,
} from './service.ts';
export { DEFAULT_STOP_TIMEOUT_MS } from './stopWithin.ts';
export { compileFlow, type WorkflowMachine } from './workflow/compileFlow.ts';
export {
  createStepRunner,
  DEFAULT_STEP_HEARTBEAT_MS,
  type StepRunnerOptions,
} from './workflow/stepRunner.ts';
export { subTaskId } from './workflow/steps/pipeline.ts';
export type {
  StepRunInput,
  StepRunOutput,
  WorkflowContext,
  WorkflowInput,
  WorkflowOutput,
} from './workflow/workflowTypes.ts';
