import { Kvm } from '@nats-io/kv';
import { BUCKETS } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NewerJournalRecordError } from '../../src/durable/newerJournalRecord.ts';
import { StepJournal } from '../../src/durable/stepJournal.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

let nats: TestNats;
let bus: NatsBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await NatsBus.connect({ servers: nats.url, name: 'newer-journal', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

describe('the journal bucket over NATS, holding a record a newer host wrote', () => {
  it('reads it as a newer record (not as nothing), and a known kind that does not fit as nothing, as before', async () => {
    const raw = await new Kvm(bus.connection).open(BUCKETS.journal);
    await raw.put(
      'demo.t1.code.1.1.model',
      JSON.stringify({ kind: 'model.plan', plan: ['a'], recordedAt: 'x' }),
    );
    await raw.put('demo.t1.code.1.1.0', JSON.stringify({ kind: 'tool.result', tool: 3 }));
    const journal = (await StepJournal.open(bus)).forPipeline('demo');

    await expect(journal.entry('t1.code.1.1.model')).rejects.toMatchObject({
      name: 'NewerJournalRecord',
      code: 'journal_from_newer_host',
      kind: 'model.plan',
      message: expect.stringContaining('Upgrade this host'),
    });
    await expect(journal.recordedTurn('t1.code.1.1.model')).rejects.toBeInstanceOf(NewerJournalRecordError);
    expect(await journal.entry('t1.code.1.1.0')).toBeUndefined();
  });
});
