export * from './tools/index.ts';
export * from './transport/index.ts';
export * from './logging/index.ts';
export { type Clock, systemClock, type IdGenerator, randomId, newTraceparent } from './events/clock.ts';
export { EventFactory, type EventScope, type EventRoute, preview } from './events/eventFactory.ts';
export {
  agentMachine,
  parseVerdict,
  type AgentMachineInput,
  type AgentOutput,
  type AgentEmitted,
  type AgentFailure,
  type ModelCallResult,
  type ToolRunResult,
} from './agent/agentMachine.ts';
export type { AgentDefinition } from './agent/agentDefinition.ts';
export { runAgentStep, taskWorkspace, failedReply, type StepDeps } from './agent/runAgentStep.ts';
export { buildStepMessages } from './agent/stepPrompt.ts';
export { startAgentHost, type AgentHost, type AgentHostOptions } from './agent/agentHost.ts';
export { KvStore, type KvEntry } from './durable/kvStore.ts';
export {
  startTaskQueue,
  taskConsumerName,
  type TaskDelivery,
  type TaskQueue,
  type TaskQueueOptions,
  submitTask,
  type SubmitResult,
} from './durable/taskQueue.ts';
