import { subjects } from '@troupe/protocol';
import { type JetStreamBus, logMessage, publishToStream } from '@troupe/runtime';

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
  bus: JetStreamBus,
  pipeline: string,
  task: ExhaustedTask,
  reason: { taskId: string; message: string },
): Promise<void> {
  const subject = subjects.deadLetter(pipeline);
  const headers = {
    'Troupe-Task-Id': reason.taskId,
    'Troupe-Reason': reason.message,
    'Troupe-Deliveries': String(task.deliveries),
    'Troupe-Stream-Sequence': String(task.streamSequence),
  };
  await publishToStream(bus, subject, task.data, { headers, msgId: `dl-${task.streamSequence}` });
  logMessage(bus.logger, 'info', 'out', subject, { taskId: reason.taskId, kind: 'deadletter' });
}
