export { startCoordinator, type Coordinator, type CoordinatorOptions } from './coordinator.ts';
export { startService, type Service, type ServiceOptions } from './service.ts';
export { loadPipeline, parsePipeline, type LoadedPipeline, type LoadOptions } from './config/loadPipeline.ts';
export { ConfigError, formatIssue, type ConfigIssue } from './config/configError.ts';
export {
  PipelineConfig,
  AgentConfig,
  ModelConfig,
  StepConfig,
  PermissionRuleConfig,
} from './config/pipelineSchema.ts';
export { agentDefinitions } from './config/agentDefinitions.ts';
export { builtinTools } from './config/builtinTools.ts';
export { compileFlow, type WorkflowMachine } from './workflow/compileFlow.ts';
export type {
  WorkflowInput,
  WorkflowOutput,
  WorkflowContext,
  StepRunInput,
  StepRunOutput,
} from './workflow/workflowTypes.ts';
export { WorkflowRecord } from './workflow/workflowRecord.ts';
export { PipelineRegistry, PipelineRegistration } from './intake/pipelineRegistry.ts';
export { readServerRecord, type ServerRecord } from './serverRecord.ts';
