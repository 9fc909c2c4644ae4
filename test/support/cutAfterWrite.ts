import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a nats-server that cuts its clients off the moment one of them has sent its `cutAt`-th
 * write to a subject: that message reaches the server, nothing after it does, no reply comes back, and every later
 * connection is refused. To the rest of the system the process behind it died right after that write, as with a
 * kill -9, whatever it still does in memory; and the cut falls between two protocol messages, never inside one.
 *
 * Reads the NATS client protocol (`PUB`/`HPUB` carry a payload of a stated size; every other operation is a line).
 */
export interface CutAfterWrite {
  /** `nats://127.0.0.1:<port>`: where the process to be cut off connects. */
  url: string;
  /** The writes to the subject that went through so far. */
  writes(): number;
  /** Resolves once the cut is made (never, when it never is). */
  readonly cut: Promise<void>;
  isCut(): boolean;
  stop(): Promise<void>;
}

/** Cuts after the `cutAt`-th message published on `subject` (no cut when `cutAt` is undefined: it only counts). */
export async function cutAfterWrite(
  serverPort: number,
  subject: string,
  cutAt: number | undefined,
): Promise<CutAfterWrite> {
  let count = 0;
  let isCut = false;
  let markCut: () => void = () => {};
  const cut = new Promise<void>((resolve) => (markCut = resolve));
  const pairs = new Set<{ client: Socket; upstream: Socket }>();

  const cutAll = () => {
    isCut = true;
    for (const { client, upstream } of pairs) {
      // end() sends what was written (the last write included) before it closes the server's side.
      upstream.end();
      client.destroy();
    }
    markCut();
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
      upstream.destroy();
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
        upstream.write(operation);
        if (publishesTo(operation, subject)) {
          count += 1;
          if (cutAt !== undefined && count >= cutAt) {
            cutAll();
            return;
          }
        }
      }
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address();
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port');
  return {
    url: `nats://127.0.0.1:${address.port}`,
    writes: () => count,
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

function publishesTo(operation: Buffer, subject: string): boolean {
  const head = operation.subarray(0, Math.min(operation.length, 512)).toString('latin1');
  const words = head.slice(0, head.indexOf('\r\n')).split(' ');
  const op = words[0]?.toUpperCase();
  return (op === 'PUB' || op === 'HPUB') && words[1] === subject;
}
