import { headers as natsHeaders } from '@nats-io/transport-node';
import type { JetStreamBus } from './bus.ts';
import { jetstreamOf } from './jetstreamSetup.ts';

export interface StreamPublishOptions {
  headers?: Record<string, string>;
  /** Makes a second publish of the same message a no-op within the stream's duplicate window. */
  msgId?: string;
}

/** Stores `data` on `subject` in the stream that takes it; resolves once the stream has acknowledged it. */
export async function publishToStream(
  bus: JetStreamBus,
  subject: string,
  data: Uint8Array,
  options: StreamPublishOptions = {},
): Promise<void> {
  const headers = natsHeaders();
  for (const [key, value] of Object.entries(options.headers ?? {})) headers.set(key, value);
  await jetstreamOf(bus).publish(subject, data, {
    headers,
    ...(options.msgId === undefined ? {} : { msgID: options.msgId }),
  });
}
