/**
 * A trace collector that takes OTLP/HTTP exports and drops them, for measuring what exporting traces costs the
 * process that exports (`bench/core.mts` with OTEL_EXPORTER_OTLP_ENDPOINT set). Prints its URL, then, on SIGINT or
 * SIGTERM, how many spans it took.
 *
 *   node scripts/bench.mjs otlpSink
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let spans = 0;
const server = createServer((request, response) => {
  let body = '';
  request.setEncoding('utf8');
  request.on('data', (chunk: string) => (body += chunk));
  request.on('end', () => {
    // Counting span ids is cheap next to exporting them.
    spans += (body.match(/"spanId"/g) ?? []).length;
    response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:${port}\n`);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    process.stdout.write(
      `${JSON.stringify({ bench: 'otlpSink', figure: 'spans received', value: spans })}\n`,
    );
    server.close(() => process.exit(0));
  });
}
