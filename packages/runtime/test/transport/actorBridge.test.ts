import { ControlMessage, InvalidMessageEvent, subjects } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bridgeToActor } from '../../src/transport/actorBridge.ts';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, eventually, startServer } from './natsFixture.ts';

let server: EmbeddedNats;
let bus: NatsBus;

beforeAll(async () => {
  server = await startServer({ jetstream: false });
  bus = await NatsBus.connect({ servers: server.url, name: 'bridge-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await server?.stop();
});

type WorkflowEvent = { type: 'CANCEL'; reason: string | undefined; subject: string };

describe('bridgeToActor', () => {
  it('sends each valid message into the actor and keeps invalid ones out', async () => {
    const received: WorkflowEvent[] = [];
    const reports: InvalidMessageEvent[] = [];
    bus.subscribe(subjects.invalid, InvalidMessageEvent, (d) => void reports.push(d.value));
    const sub = bridgeToActor(
      bus,
      subjects.control('task-9'),
      ControlMessage,
      { send: (event: WorkflowEvent) => void received.push(event) },
      (msg, delivery) => ({
        type: 'CANCEL',
        reason: msg.action === 'cancel' ? msg.reason : undefined,
        subject: delivery.subject,
      }),
      { reporter: 'coordinator' },
    );
    await bus.flush();

    bus.publish(subjects.control('task-9'), { action: 'explode' });
    bus.publish(subjects.control('task-9'), { action: 'cancel', reason: 'user asked' });
    await eventually(() => received.length === 1 && reports.length === 1);

    expect(received).toEqual([{ type: 'CANCEL', reason: 'user asked', subject: 'troupe.control.task-9' }]);
    expect(reports[0]).toMatchObject({
      reporter: 'coordinator',
      subject: 'troupe.control.task-9',
      taskId: 'task-9',
    });

    sub.unsubscribe();
    await sub.closed;
    bus.publish(subjects.control('task-9'), { action: 'cancel' });
    await bus.flush();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(received).toHaveLength(1);
  });
});
