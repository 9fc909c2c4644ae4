export { type FollowOptions, followTaskEvents, type SequencedEvent } from '@troupe/client';
export { AgUiMapper } from './agui.ts';
export * as api from './api.ts';
export {
  AuthRefusal,
  authorize,
  hashToken,
  newToken,
  type Principal,
  Scope,
  TokenEntry,
  TokenStore,
  TokensFile,
} from './auth.ts';
export { type Gateway, type GatewayOptions, startGateway } from './gateway.ts';
export { serveMcpStdio } from './mcp/serveStdio.ts';
export { type BrowserOrigins, webSocketRefusal } from './origins.ts';
export { DEFAULT_STREAM_CAPS, type StreamCaps, StreamQuota, TooManyStreams } from './streamQuota.ts';
export { loadOrCreateSecret, MIN_SECRET_CHARS, TaskIds } from './taskIds.ts';
export { TOKENS_RELOAD_MS, watchTokens } from './tokenWatch.ts';
