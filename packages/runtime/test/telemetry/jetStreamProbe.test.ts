import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeJetStream } from '../../src/telemetry/jetStreamProbe.ts';
import { jetstreamManagerOf } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

let nats: TestNats;
let bus: NatsBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await NatsBus.connect({ servers: nats.url, name: 'probe-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

describe('probeJetStream', () => {
  it('finds the connection up and JetStream answering', async () => {
    expect(await probeJetStream(bus)).toEqual({ connection: 'connected' });
  });

  it('names the first stream asked about that is not there', async () => {
    await (await jetstreamManagerOf(bus)).streams.add({ name: 'PROBE_THERE', subjects: ['probe.there'] });
    const probe = await probeJetStream(bus, ['PROBE_THERE', 'PROBE_MISSING', 'PROBE_ALSO_MISSING']);
    expect(probe.connection).toBe('connected');
    expect(probe.jetstreamError).toBeUndefined();
    expect(probe.missingStream?.name).toBe('PROBE_MISSING');
    expect(probe.missingStream?.error.message).toMatch(/stream not found/i);
  });

  it('probes nothing further once the connection is closed', async () => {
    const closing = await NatsBus.connect({
      servers: nats.url,
      name: 'probe-closed',
      logger: captureLogger().logger,
    });
    await closing.close();
    expect(await probeJetStream(closing, ['PROBE_THERE'])).toEqual({ connection: 'closed' });
  });
});
