import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One span as an OTLP/HTTP JSON export carried it, its attributes and its resource's flattened to values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** OTLP numbering: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  status: { code: number; message?: string };
  events: { name: string; attributes: Record<string, unknown> }[];
  /** The resource of the process that exported it (`service.name`, …). */
  resource: Record<string, unknown>;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
}

export interface OtlpReceiver {
  /** What `OTEL_EXPORTER_OTLP_ENDPOINT` should say: the exporter posts to `<url>/v1/traces`. */
  url: string;
  /** Every span received so far, in arrival order. */
  readonly spans: ReceivedSpan[];
  /** Requests refused (not JSON, not parseable), with why. */
  readonly refused: string[];
  stop(): Promise<void>;
}

type OtlpValue = Record<string, unknown>;
type OtlpAttribute = { key: string; value: OtlpValue };

/** An OTLP `AnyValue` as a plain value: strings, numbers (int64 may come as a string), booleans, arrays. */
function plainValue(value: OtlpValue | undefined): unknown {
  if (!value) return undefined;
  if ('stringValue' in value) return value.stringValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return Number(value.doubleValue);
  if ('boolValue' in value) return value.boolValue;
  if ('arrayValue' in value) {
    const values = (value.arrayValue as { values?: OtlpValue[] }).values ?? [];
    return values.map(plainValue);
  }
  return value;
}

const attributesOf = (attributes: OtlpAttribute[] | undefined): Record<string, unknown> =>
  Object.fromEntries((attributes ?? []).map(({ key, value }) => [key, plainValue(value)]));

function body(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (text += chunk));
    request.on('end', () => resolve(text));
    request.on('error', reject);
  });
}

/**
 * A trace collector speaking OTLP/HTTP with JSON bodies (what `@opentelemetry/exporter-trace-otlp-http` sends), on
 * 127.0.0.1 and a free port: it answers `POST /v1/traces` as a collector does and keeps every span for assertions.
 */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const refused: string[] = [];
  const server = createServer(async (request, response) => {
    if (request.method !== 'POST' || request.url !== '/v1/traces') {
      response.writeHead(404).end();
      return;
    }
    const type = request.headers['content-type'] ?? '';
    const text = await body(request);
    if (!type.startsWith('application/json')) {
      refused.push(`content-type ${type}`);
      response.writeHead(415).end();
      return;
    }
    let parsed: { resourceSpans?: unknown[] };
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      refused.push(`not JSON: ${(error as Error).message}`);
      response.writeHead(400).end();
      return;
    }
    for (const resourceSpans of (parsed.resourceSpans ?? []) as {
      resource?: { attributes?: OtlpAttribute[] };
      scopeSpans?: { spans?: Record<string, unknown>[] }[];
    }[]) {
      const resource = attributesOf(resourceSpans.resource?.attributes);
      for (const scope of resourceSpans.scopeSpans ?? []) {
        for (const span of scope.spans ?? []) {
          spans.push({
            traceId: String(span.traceId),
            spanId: String(span.spanId),
            ...(span.parentSpanId ? { parentSpanId: String(span.parentSpanId) } : {}),
            name: String(span.name),
            kind: Number(span.kind),
            attributes: attributesOf(span.attributes as OtlpAttribute[]),
            status: (span.status as ReceivedSpan['status'] | undefined) ?? { code: 0 },
            events: ((span.events ?? []) as { name: string; attributes?: OtlpAttribute[] }[]).map((e) => ({
              name: e.name,
              attributes: attributesOf(e.attributes),
            })),
            resource,
            startTimeUnixNano: String(span.startTimeUnixNano),
            endTimeUnixNano: String(span.endTimeUnixNano),
          });
        }
      }
    }
    response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    refused,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
