import type { TaskLimits } from '@troupe/protocol';
import type { JetStreamBus, Logger } from '@troupe/runtime';
import type { GatewayActions } from './actions.ts';
import type { OpenStreams } from './openStreams.ts';
import type { Sessions } from './sessions.ts';
import type { StreamQuota } from './streamQuota.ts';

/** What the gateway's route families share, built once by `startGateway` and handed to each. */
export interface GatewayServices {
  bus: JetStreamBus;
  logger: Logger;
  /** Tasks, approvals and questions, checked against the caller's token. */
  actions: GatewayActions;
  sessions: Sessions;
  /** The event streams, WebSockets and long requests open now, ended by a stop or a revoked token. */
  streams: OpenStreams;
  /** Per-token caps on open streams and the NATS consumers they hold. */
  quota: StreamQuota;
  /** What a task may be at most: the coordinators' limits. */
  taskLimits: TaskLimits;
}

/** The largest body a task is sent in: an input as large as may be stored, and a task as large as may be published. */
export const taskBodyLimit = (limits: TaskLimits): number => limits.maxInputBytes + limits.maxTaskBytes;
