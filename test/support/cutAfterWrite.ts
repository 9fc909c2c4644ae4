import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a nats-server that cuts its clients off the moment one of them has sent the write to a
 * subject that `cutAfter` picks: that message reaches the server, nothing after it does, no reply comes back, and
 * every later connection is refused. To the rest of the system the process behind it died right after that write, as with a
 * kill -9, whatever it still does in memory; and the cut falls between two protocol messages, never inside one.
 *
 * Reads the NATS client protocol (`PUB`/`HPUB` carry a payload of a stated size; every other operation is a line).
 */
export interface CutAfterWrite {
  /** `nats://127.0.0.1:<port>`: where the process to be cut off connects. */
  url: string;
  /** The payloads of the writes to the subject that went through so far, in order. */
  writes(): Buffer[];
  /** Resolves once the cut is made and the server has read the last write (never, when no cut is made). */
  readonly cut: Promise<void>;
  isCut(): boolean;
  stop(): Promise<void>;
}

/**
 * Cuts after the message published on `subject` for which `cutAfter` (given its payload and the payloads before it)
 * says so; without `cutAfter` it only records them. With `hold`, a message on `subject` it picks never reaches the
 * server (it is recorded, and may be the one to cut after): a write lost on its way, the process going on.
 */
export async function cutAfterWrite(
  serverPort: number,
  subject: string,
  cutAfter?: (payload: Buffer, before: readonly Buffer[]) => boolean,
  { hold }: { hold?: (payload: Buffer) => boolean } = {},
): Promise<CutAfterWrite> {
  const written: Buffer[] = [];
  let isCut = false;
  let markCut: () => void = () => {};
  const cut = new Promise<void>((resolve) => (markCut = resolve));
  const pairs = new Set<{ client: Socket; upstream: Socket }>();

  const cutAll = () => {
    isCut = true;
    const closed = [...pairs].map(
      ({ client, upstream }) =>
        new Promise<void>((resolve) => {
          upstream.once('close', () => resolve());
          // end() sends what was written (the last write included) before it closes the server's side; the server
          // closes its own once it has read it all. Destroyed now, the socket would drop what it still buffers (a
          // large record, or any write on a busy machine), and the cut would fall before the write it is after.
          upstream.end();
          client.destroy();
        }),
    );
    // Cut once the server has read the last write: whoever then reads what the process left behind finds it.
    void Promise.all(closed).then(() => markCut());
  };

  const proxy: Server = createServer((client) => {
    if (isCut) {
      client.destroy();
      return;
    }
    const upstream = connect(serverPort, '127.0.0.1');
    const pair = { client, upstream };
    pairs.add(pair);
    client.on('error', () => {});
    upstream.on('error', () => {});
    client.on('close', () => {
      pairs.delete(pair);
      // Cut, the upstream is ending: it closes once its last write has gone through (see cutAll).
      if (!isCut) upstream.destroy();
    });
    upstream.on('close', () => client.destroy());
    upstream.on('data', (chunk: Buffer) => {
      if (!isCut) client.write(chunk);
    });
    let pending = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      if (isCut) return;
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const size = nextOperation(pending);
        if (size === undefined) return;
        const operation = pending.subarray(0, size);
        pending = pending.subarray(size);
        const payload = payloadTo(operation, subject);
        if (payload === undefined || hold?.(payload) !== true) upstream.write(operation);
        if (payload === undefined) continue;
        const cutNow = cutAfter?.(payload, written) === true;
        written.push(payload);
        if (cutNow) {
          cutAll();
          return;
        }
      }
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address();
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port');
  return {
    url: `nats://127.0.0.1:${address.port}`,
    writes: () => [...written],
    cut,
    isCut: () => isCut,
    async stop() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}

/** The length of the first whole operation in `buffer`, or undefined when it has not all arrived yet. */
function nextOperation(buffer: Buffer): number | undefined {
  const lineEnd = buffer.indexOf('\r\n');
  if (lineEnd === -1) return undefined;
  const line = buffer.subarray(0, lineEnd).toString('latin1');
  const words = line.split(' ').filter(Boolean);
  const op = words[0]?.toUpperCase();
  // PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <total size>: then the payload and \r\n.
  if (op === 'PUB' || op === 'HPUB') {
    const payload = Number(words.at(-1));
    const total = lineEnd + 2 + payload + 2;
    return buffer.length >= total ? total : undefined;
  }
  return lineEnd + 2;
}

/** The payload (headers left out) of a whole operation that publishes to `subject`; undefined for any other. */
function payloadTo(operation: Buffer, subject: string): Buffer | undefined {
  const lineEnd = operation.indexOf('\r\n');
  const words = operation.subarray(0, lineEnd).toString('latin1').split(' ').filter(Boolean);
  const op = words[0]?.toUpperCase();
  if ((op !== 'PUB' && op !== 'HPUB') || words[1] !== subject) return undefined;
  const body = operation.subarray(lineEnd + 2, operation.length - 2);
  // HPUB <subject> [reply] <header size> <total size>: the headers come first.
  return op === 'HPUB' ? body.subarray(Number(words.at(-2))) : body;
}
