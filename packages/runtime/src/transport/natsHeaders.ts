import { headers as createHeaders, type MsgHdrs } from '@nats-io/transport-node';

/** Headers as nats.js sends them. */
export function toMsgHdrs(record: Record<string, string>): MsgHdrs {
  const hdrs = createHeaders();
  for (const [key, value] of Object.entries(record)) hdrs.set(key, value);
  return hdrs;
}

/** A message's headers as a plain record, the last value of each; undefined when it has none. */
export function fromMsgHdrs(hdrs: MsgHdrs | undefined): Record<string, string> | undefined {
  if (hdrs === undefined) return undefined;
  const record: Record<string, string> = {};
  for (const [key, values] of hdrs) {
    const last = values.at(-1);
    if (last !== undefined) record[key] = last;
  }
  return record;
}
