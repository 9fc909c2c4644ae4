import type { AgentStepReply, AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { StepStop } from '../../src/agent/agentMachine.ts';
import type { AgentStep } from '../../src/agent/agentStep.ts';
import type { Delivery } from '../../src/transport/bus.ts';
import type { HeartbeatSender } from '../../src/transport/heartbeatSender.ts';

/** Fakes of what an agent host's parts are given: a step's request and delivery, an agent step, a heartbeat sender. */

export const stepRequest = (stepId: string, extra: Partial<AgentStepRequest> = {}): AgentStepRequest => ({
  stepId,
  taskId: stepId.split('.')[0] ?? stepId,
  pipeline: 'demo',
  agent: 'writer',
  step: 'write',
  round: 1,
  goal: 'write',
  context: [],
  expect: 'text',
  ...extra,
});

/** A delivery of `request` whose sender waits on `inbox`; what it is answered is kept. */
export function delivered(request: AgentStepRequest, inbox = `inbox.${Math.random()}`) {
  const answers: unknown[] = [];
  const delivery: Delivery<AgentStepRequest> = {
    subject: `troupe.agents.${request.pipeline}.${request.agent}`,
    value: request,
    reply: inbox,
    respond: (payload) => answers.push(payload),
  };
  return { delivery, answers, inbox };
}

/** An agent step that ends when the test says so, and keeps the stops it was sent. */
export function heldStep() {
  const stops: StepStop[] = [];
  let end: (reply: AgentStepReply) => void = () => {};
  const reply = new Promise<AgentStepReply>((resolve) => (end = resolve));
  const step: AgentStep = { reply, stop: (stop) => stops.push(stop) };
  return { step, stops, end: (r: AgentStepReply) => end(r) };
}

/** A heartbeat sender that keeps what it was told. */
export function recordingHeartbeats() {
  const beats: { stepId: string; inboxes: readonly string[]; heartbeat: StepHeartbeat }[] = [];
  const stopped: string[] = [];
  const heartbeats: HeartbeatSender = {
    beat: (stepId, inboxes, _intervalMs, heartbeat) => beats.push({ stepId, inboxes, heartbeat }),
    stop: (stepId) => stopped.push(stepId),
    onListening: () => () => {},
    close: async () => {},
  };
  return { heartbeats, beats, stopped };
}

/** A reply of a step that succeeded. */
export const okReply = (stepId: string): AgentStepReply => ({
  ok: true,
  stepId,
  output: 'written',
  usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
  turns: 1,
});
