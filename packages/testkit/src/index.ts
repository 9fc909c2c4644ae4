export { captureLogger, type LogLine } from './capturedLogs.ts';
export { type FakeAnthropicOptions, startFakeAnthropic } from './fakeAnthropic.ts';
export type { FakeModelServer, FakeReply, RecordedRequest } from './fakeModelServer.ts';
export { type FakeOpenAIOptions, type RefusalShape, startFakeOpenAI } from './fakeOpenAI.ts';
export {
  type McpHttpRequest,
  type McpToolCall,
  startTestMcpHttpServer,
  TEST_MCP_STDIO_SERVER,
  type TestMcpHttpServer,
} from './mcpServers.ts';
export { type CarriedMessage, MemoryBus, type MemoryBusOptions } from './memoryBus.ts';
export { MemoryKv } from './memoryKv.ts';
export { startTestNats, type TestNats, type TestNatsOptions } from './natsServer.ts';
export { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from './otlpReceiver.ts';
export { SimulatedClock } from './simulatedClock.ts';
export { anthropicPromptSeen, withoutPromptCache } from './withoutPromptCache.ts';
