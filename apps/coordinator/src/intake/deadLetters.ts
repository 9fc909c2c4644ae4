import { headers as natsHeaders } from '@nats-io/transport-node';
import { subjects } from '@troupe/protocol';
import { jetstreamOf, logMessage, type NatsBus } from '@troupe/runtime';

/** A task given up on: delivered more often than allowed without finishing. */
export interface ExhaustedTask {
  streamSequence: number;
  subject: string;
  data: Uint8Array;
  headers: Record<string, string>;
  /** When the message was stored, in ms since the epoch. */
  storedAt: number;
  deliveries: number;
}

/** Stores a task on `troupe.deadletter.<pipeline>` with why it was given up on. */
export async function deadLetter(
  bus: NatsBus,
  pipeline: string,
  task: ExhaustedTask,
  reason: { taskId: string; message: string },
): Promise<void> {
  const subject = subjects.deadLetter(pipeline);
  const h = natsHeaders();
  h.set('Troupe-Task-Id', reason.taskId);
  h.set('Troupe-Reason', reason.message);
  h.set('Troupe-Deliveries', String(task.deliveries));
  h.set('Troupe-Stream-Sequence', String(task.streamSequence));
  await jetstreamOf(bus).publish(subject, task.data, { headers: h, msgID: `dl-${task.streamSequence}` });
  logMessage(bus.logger, 'info', 'out', subject, { taskId: reason.taskId, kind: 'deadletter' });
}
