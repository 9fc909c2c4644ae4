export { startTestNats, type TestNats, type TestNatsOptions } from './natsServer.ts';
