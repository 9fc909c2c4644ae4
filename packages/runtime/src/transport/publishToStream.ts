import { headers as natsHeaders } from '@nats-io/transport-node';
import type { JetStreamBus } from './bus.ts';
import { jetstreamOf } from './jetstreamSetup.ts';

export interface StreamPublishOptions {
  headers?: Record<string, string>;
  /** Makes a second publish of the same message a no-op within the stream's duplicate window. */
  msgId?: string;
}

/** What the stream said of a message it took. */
export interface StreamAck {
  /** The message's place in the stream (the first copy's, for a duplicate). */
  seq: number;
  /** True when a message with the same `msgId` was stored within the duplicate window: nothing new was stored. */
  duplicate: boolean;
}

/** Stores `data` on `subject` in the stream that takes it; resolves once the stream has acknowledged it. */
export async function publishToStream(
  bus: JetStreamBus,
  subject: string,
  data: Uint8Array | string,
  options: StreamPublishOptions = {},
): Promise<StreamAck> {
  const headers = natsHeaders();
  for (const [key, value] of Object.entries(options.headers ?? {})) headers.set(key, value);
  const ack = await jetstreamOf(bus).publish(subject, data, {
    headers,
    ...(options.msgId === undefined ? {} : { msgID: options.msgId }),
  });
  return { seq: ack.seq, duplicate: ack.duplicate };
}
