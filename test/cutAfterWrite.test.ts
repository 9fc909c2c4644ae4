import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cutAfterWrite } from './support/cutAfterWrite.ts';

describe('cutAfterWrite', () => {
  let nats: TestNats;
  let client: NatsConnection;
  beforeAll(async () => {
    nats = await startTestNats();
    client = await connect({ servers: nats.url, name: 'cut-test' });
  });
  afterAll(async () => {
    await client?.close();
    await nats?.stop();
  });

  it('cuts after the write it picks, which reaches the server whole, however large, and nothing after it', async () => {
    const kv = await new Kvm(client).create('cut_test');
    const proxy = await cutAfterWrite(nats.port, '$KV.cut_test.big', (payload) => payload[0] === 2);
    const cutOff = await connect({ servers: proxy.url, name: 'cut-off', reconnect: false });
    const through = await new Kvm(cutOff).open('cut_test');
    // Near the server's largest payload: more than a socket takes in one go.
    const large = (mark: number) => new Uint8Array(900_000).fill(mark);
    await through.put('big', large(1));
    const last = through.put('big', large(2)).catch(() => undefined);
    void through.put('big', large(3)).catch(() => undefined);
    await proxy.cut;
    await last;
    expect(proxy.isCut()).toBe(true);
    expect(proxy.writes().map((payload) => payload[0])).toEqual([1, 2]);
    const stored = await kv.get('big');
    expect(stored?.revision).toBe(2);
    expect(stored?.value.length).toBe(900_000);
    expect(stored?.value[0]).toBe(2);
    await cutOff.close().catch(() => undefined);
    await proxy.stop();
  });
});
