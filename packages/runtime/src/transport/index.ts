export { bridgeToActor, type EventReceiver } from './actorBridge.ts';
export type {
  Bus,
  BusSubscription,
  Delivery,
  JetStreamBus,
  Listening,
  ReplyMessage,
  RequestOptions,
  StatusListener,
  SubscribeOptions,
} from './bus.ts';
export {
  type DurableConsumer,
  type DurableConsumerOptions,
  openDurableConsumer,
  type StoredBatch,
  type StoredMessage,
} from './durableConsumer.ts';
export {
  type EmbeddedNats,
  findFreePort,
  findNatsServer,
  NATS_SERVER_MISSING_HELP,
  type NatsServerOptions,
  startNatsServer,
} from './embeddedNats.ts';
export {
  type HeartbeatRequest,
  type HeartbeatRequestListener,
  type HeartbeatRequestOptions,
  requestWithHeartbeats,
  type StartHeartbeatRequestOptions,
  startHeartbeatRequest,
  type TimeoutHold,
} from './heartbeatRequest.ts';
export {
  type HeartbeatSender,
  InlineHeartbeatSender,
  type ListeningReport,
  type ThreadedHeartbeatOptions,
  ThreadedHeartbeatSender,
} from './heartbeatSender.ts';
export {
  ensureOrAwaitTroupeStreams,
  ensureTroupeStreams,
  isStreamMissing,
  jetstreamManagerOf,
  type TroupeBucket,
  type TroupeStreamsOptions,
} from './jetstreamSetup.ts';
export { type CarriedMessage, MemoryBus, type MemoryBusOptions } from './memoryBus.ts';
export {
  type NatsAccess,
  NatsAccessError,
  type NatsAccessSources,
  readNatsAccess,
} from './natsAccess.ts';
export { type BusOptions, connectBus, eventBatchSetting, type MessageMeta, NatsBus } from './natsBus.ts';
export { createNkeyUser, type NkeyUser } from './nkeyUser.ts';
export { publishToStream, type StreamAck, type StreamPublishOptions } from './publishToStream.ts';
export {
  lastStreamSequence,
  openStreamReader,
  type StreamMessage,
  type StreamMessages,
  type StreamReader,
  type StreamReaderOptions,
} from './streamReader.ts';
export { type ReplyErrorCode, TransportError, type TransportErrorCode } from './transportError.ts';
export {
  DEFAULT_NO_JETSTREAM_MS,
  DEFAULT_OUTAGE_MS,
  isPermissionRefusal,
  permissionRefusal,
  type UntilReachableOptions,
  untilReachable,
} from './untilReachable.ts';
