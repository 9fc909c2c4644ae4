import { jetstreamManager } from '@nats-io/jetstream';
import { taskConsumerName } from '@troupe/coordinator';
import { STREAMS } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { examplePath, type Harness, kinds, publishTask, startHarness } from './support/harness.ts';

describe('a coordinator whose events wait to be stored', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await h?.stop();
  });

  it('takes no new task while 2,000 or more of its events wait, and takes it once they are out', async () => {
    // As if the tasks in flight produced events faster than EVENTS stores them.
    const backlog = vi.spyOn(h.bus, 'pendingEvents', 'get').mockReturnValue(2_000);
    const jsm = await jetstreamManager(h.client);
    const consumer = () => jsm.consumers.info(STREAMS.tasks, taskConsumerName('demo'));
    // The pull already waiting ends (it expires); no other is made while the backlog lasts.
    await expect.poll(async () => (await consumer()).num_waiting, { timeout: 10_000 }).toBe(0);
    publishTask(h, 'demo', { id: 'backlogged-1', goal: 'wait for the events to go out' });
    await expect.poll(async () => (await consumer()).num_pending, { timeout: 10_000 }).toBe(1);
    expect((await consumer()).num_waiting).toBe(0);
    expect(h.eventsOf('backlogged-1')).toEqual([]);

    backlog.mockRestore();
    const final = await h.finalOf('backlogged-1');
    expect(final.kind).toBe('task.completed');
    expect(kinds(h.eventsOf('backlogged-1'))[0]).toBe('task.accepted');
  }, 60_000);
});

describe('a coordinator stopping while a final event waits to be stored', () => {
  const logLines: string[] = [];
  let h: Harness;
  beforeAll(async () => {
    // The wait is 10 s by default; shorter here, as what is checked is what happens once it is over.
    h = await startHarness([examplePath('demo.yaml')], { logLines, finalEventWaitMs: 1_000 });
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await h?.stop();
  });

  it('waits for it a while at most, then leaves the message to be delivered again', async () => {
    // The task's end waits for its final event, which never gets stored (as with NATS out of reach).
    const publish = h.bus.publishEvent.bind(h.bus);
    vi.spyOn(h.bus, 'publishEvent').mockImplementation((event) =>
      event.kind === 'task.completed' ? new Promise<boolean>(() => {}) : publish(event),
    );
    publishTask(h, 'demo', { id: 'unstored-1', goal: 'end while the events wait' });
    await expect
      .poll(() => logLines.some((l) => l.includes('the final event of task unstored-1 is not stored yet')), {
        timeout: 60_000,
      })
      .toBe(true);

    await h.coordinator.stop();
    expect(
      logLines.some((l) =>
        l.includes('this coordinator is stopping; its message is left to be delivered again'),
      ),
    ).toBe(true);
    const jsm = await jetstreamManager(h.client);
    const consumer = await jsm.consumers.info(STREAMS.tasks, taskConsumerName('demo'));
    expect(consumer.num_ack_pending).toBe(1);
  }, 90_000);
});
