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
export { type FollowOptions, followTaskEvents, type SequencedEvent } from './taskEvents.ts';
