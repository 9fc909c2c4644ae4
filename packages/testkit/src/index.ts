export { type FakeAnthropicOptions, startFakeAnthropic } from './fakeAnthropic.ts';
export type { FakeModelServer, FakeReply, RecordedRequest } from './fakeModelServer.ts';
export { type FakeOpenAIOptions, startFakeOpenAI } from './fakeOpenAI.ts';
export { startTestNats, type TestNats, type TestNatsOptions } from './natsServer.ts';
