import type { TaskLimits } from '@troupe/protocol';
import type { JetStreamBus, Logger } from '@troupe/runtime';
import type { PushSettings } from './a2a/pushDelivery.ts';
import type { TokenStore } from './auth.ts';
import type { StreamCaps } from './streamQuota.ts';

/** How a gateway is started: what `troupe gateway` and `troupe up --gateway` read from their flags. */
export interface GatewayOptions {
  bus: JetStreamBus;
  logger: Logger;
  /** Who may call; every `/v1` request needs a token of theirs unless `auth` is `none`. */
  tokens: TokenStore;
  /** `none`: no token asked, every request acts as `anonymous` with every scope (local use only). */
  auth?: 'tokens' | 'none';
  host?: string;
  /** 0: any free port. */
  port: number;
  /** Origins allowed to call from a browser (CORS) and to open WebSockets; none by default. `*` allows any. */
  corsOrigins?: readonly string[];
  /**
   * The URL clients reach this gateway at (`https://troupe.example.com`): pages of its origin may open WebSockets,
   * and its host is trusted as this gateway's own name.
   */
  publicUrl?: string;
  /**
   * The secret idempotency keys' task ids are made with (at least 32 bytes): every gateway of a deployment needs the
   * same one, so a key means the same task on each. A random one when absent (ids that hold in this process only).
   */
  idSecret?: Uint8Array | string;
  /** What a task may be at most: the coordinators' limits (the protocol's defaults unless they were changed). */
  taskLimits?: TaskLimits;
  /** Per-token caps on open event streams and the NATS consumers they hold (100 and 300). */
  streamCaps?: Partial<StreamCaps>;
  /**
   * The command-line flags a refusal tells the operator to change, when the gateway was started with others than
   * `troupe gateway`'s (`troupe up --gateway` names them `--gateway-public-url`, `--gateway-max-streams`, …).
   */
  flags?: GatewayFlagNames;
  /** How often the tokens file is read again besides when it signals a change, in ms (1,000). */
  tokensReloadMs?: number;
  /** The longest `?wait=` honoured, in seconds (300). */
  maxWaitSeconds?: number;
  /** Where the built dashboard is (`apps/gateway/dashboard/dist` by default); `false` serves none. */
  dashboardDir?: string | false;
  /** A2A push notifications: where webhooks may go and how they are retried; `false` runs no delivery worker here. */
  a2aPush?: PushSettings | false;
  /**
   * The directory task workspaces are under (`<dir>/<pipeline>/<taskId>`: a `troupe up`'s or worker's
   * `<home>/workspaces`, or a volume they share), served by `GET /v1/tasks/{id}/files`; none served when absent.
   */
  workspaces?: string;
  /** The largest workspace file served, in bytes (16 MiB). */
  maxFileBytes?: number;
}

/** The command-line flags behind the options a refusal may point to. */
export interface GatewayFlagNames {
  publicUrl: string;
  corsOrigin: string;
  maxStreams: string;
  maxConsumers: string;
  maxFileSize: string;
}
