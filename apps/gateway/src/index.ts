export { type FollowOptions, followTaskEvents, type SequencedEvent } from '@troupe/client';
export type { StoredPushConfig } from '@troupe/protocol';
// The tokens file's shapes live in protocol; `Scope` is the name `troupe gateway token` knows them by.
export { TokenEntry, TokenScope as Scope, TokensFile } from '@troupe/protocol';
export {
  MAX_CONFIGS_PER_TASK,
  type PushConfigEntry,
  PushConfigs,
  type PushConfigsOptions,
} from './a2a/pushConfigs.ts';
export { PushDelivery, type PushSettings } from './a2a/pushDelivery.ts';
export { PushError, type PushErrorCode } from './a2a/pushError.ts';
export { checkPushUrl, type PushUrlPolicy } from './a2a/pushUrls.ts';
export { TaskFold } from './a2a/taskMapping.ts';
export { AgUiMapper } from './agui.ts';
export { AuthRefusal, authorize, hashToken, newToken, type Principal, TokenStore } from './auth.ts';
export { contentTypeOf } from './files/contentType.ts';
export { DEFAULT_MAX_FILE_BYTES } from './files/fileRoutes.ts';
export { CLOSE_GRACE_MS, type Gateway, type GatewayOptions, startGateway } from './gateway.ts';
export { serveMcpStdio } from './mcp/serveStdio.ts';
export { type BrowserOrigins, webSocketRefusal } from './origins.ts';
export { DEFAULT_STREAM_CAPS, type StreamCaps, StreamQuota, TooManyStreams } from './streamQuota.ts';
export { loadOrCreateSecret, MIN_SECRET_CHARS, TaskIds } from './taskIds.ts';
export { TOKENS_RELOAD_MS, watchTokens } from './tokenWatch.ts';
