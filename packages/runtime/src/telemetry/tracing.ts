import {
  type Attributes,
  type Context,
  isSpanContextValid,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { errorMessage } from '@troupe/protocol';
import type { Logger } from '../logging/index.ts';
import { redactSecrets } from '../logging/secrets.ts';

/**
 * Troupe's OpenTelemetry traces: one trace per task, by the GenAI semantic conventions (`invoke_workflow`,
 * `invoke_agent`, `chat`, `execute_tool`). Spans are made through the OpenTelemetry API, which does nothing until
 * {@link startTracing} registers a provider: with no OTLP endpoint configured the SDK is not even loaded.
 */

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The tracer every Troupe span is made with. */
export const tracer = (): Tracer => trace.getTracer('troupe');

/** Whether message and tool content goes on spans (opt-in; see {@link startTracing}). */
let contentCaptured = false;
export const capturesContent = (): boolean => contentCaptured;

/** The ids the next root span takes, so a task's first workflow span is the span its traceparent names. */
let forcedIds: { traceId: string; spanId: string } | undefined;

/** The remote span a W3C `traceparent` names, as a parent context; the root context when it names none. */
export function contextOf(traceparent: string | undefined): Context {
  const match = TRACEPARENT.exec(traceparent ?? '');
  if (!match) return ROOT_CONTEXT;
  const [, traceId = '', spanId = '', flags = '00'] = match;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16) as TraceFlags,
    isRemote: true,
  });
}

/**
 * A span's context as a W3C `traceparent`, for the messages its work sends; `fallback` when nothing is traced. A
 * span this process's sampler left out goes on unsampled (flags `00`), so the processes the work goes to, sampling
 * by their parent as the SDK does by default, leave it out too rather than export spans whose parent never arrives.
 */
export function traceparentOf(span: Span | undefined, fallback: string): string {
  if (!span) return fallback;
  const context = span.spanContext();
  const sampledOut = isSpanContextValid(context) && (context.traceFlags & TraceFlags.SAMPLED) === 0;
  if (!span.isRecording() && !sampledOut) return fallback;
  const { traceId, spanId, traceFlags } = context;
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
}

/**
 * Starts the span of a run of a task's workflow. The first run's span is the one the task's `traceparent` names
 * (its trace's root), so the task's events, which carry that traceparent, point at it; a run that resumes the task
 * is a child of it.
 */
export function startWorkflowSpan(
  pipeline: string,
  traceparent: string,
  firstRun: boolean,
  attributes: Attributes,
): Span {
  const options = {
    kind: SpanKind.INTERNAL,
    attributes: {
      'gen_ai.operation.name': 'invoke_workflow',
      'gen_ai.workflow.name': pipeline,
      ...attributes,
    },
  };
  const name = `invoke_workflow ${pipeline}`;
  const match = TRACEPARENT.exec(traceparent);
  if (!firstRun || !match) return tracer().startSpan(name, options, contextOf(traceparent));
  forcedIds = { traceId: match[1] ?? '', spanId: match[2] ?? '' };
  try {
    return tracer().startSpan(name, options, ROOT_CONTEXT);
  } finally {
    forcedIds = undefined;
  }
}

/** Starts a span as a child of `parent` (a span of this process, or none: then a root span). */
export function startChildSpan(
  parent: Span | undefined,
  name: string,
  kind: SpanKind,
  attributes: Attributes,
): Span {
  const context = parent ? trace.setSpan(ROOT_CONTEXT, parent) : ROOT_CONTEXT;
  return tracer().startSpan(name, { kind, attributes }, context);
}

/**
 * Starts the span of a call this process makes to another system (a remote agent), as a child of the span
 * `traceparent` names; {@link traceparentOf} it gives the header that carries the trace on.
 */
export function startClientSpan(traceparent: string | undefined, name: string, attributes: Attributes): Span {
  return tracer().startSpan(name, { kind: SpanKind.CLIENT, attributes }, contextOf(traceparent));
}

/** Ends a span; with a failure, marks it an error of that type (a low-cardinality code). */
export function endSpan(
  span: Span,
  failure?: { type: string; message: string },
  attributes?: Attributes,
): void {
  if (attributes) span.setAttributes(attributes);
  if (failure) {
    span.setAttribute('error.type', failure.type);
    span.setStatus({ code: SpanStatusCode.ERROR, message: redactSecrets(failure.message) });
  }
  span.end();
}

/** What {@link startTracing} started: flush and stop it before the process exits. */
export interface Tracing {
  /** Exports the spans that have ended; rejects when the export fails. */
  flush(): Promise<void>;
  /** Exports what is left and stops; never throws (a collector out of reach is logged). */
  shutdown(): Promise<void>;
}

export interface TracingOptions {
  /** `service.name` unless `OTEL_SERVICE_NAME` says otherwise: `troupe-coordinator`, `troupe-worker`, … */
  service: string;
  logger?: Logger;
  env?: NodeJS.ProcessEnv;
  /** Where spans go instead of OTLP/HTTP (tests, or an exporter of the embedding application's choice). */
  exporter?: SpanExporter;
}

/** How long an export may take before it is given up (a collector out of reach must not hold a process up). */
const EXPORT_TIMEOUT_MS = 5_000;

/**
 * Registers an OpenTelemetry tracer provider exporting over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`;
 * undefined otherwise, and nothing is loaded. Message content (prompts, replies, tool arguments and results) goes on
 * spans only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` set to `true`, `SPAN_ONLY` or `SPAN_AND_EVENT`.
 */
export async function startTracing(options: TracingOptions): Promise<Tracing | undefined> {
  const env = options.env ?? process.env;
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER === 'none') return undefined;
  if (!endpoint && !options.exporter) return undefined;
  const [{ BasicTracerProvider, BatchSpanProcessor, RandomIdGenerator }, { OTLPTraceExporter }, resources] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
  const random = new RandomIdGenerator();
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': options.service }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new BasicTracerProvider({
    resource,
    idGenerator: {
      generateTraceId: () => forcedIds?.traceId ?? random.generateTraceId(),
      generateSpanId: () => forcedIds?.spanId ?? random.generateSpanId(),
    },
    spanProcessors: [
      new BatchSpanProcessor(options.exporter ?? new OTLPTraceExporter({ timeoutMillis: EXPORT_TIMEOUT_MS })),
    ],
  });
  trace.setGlobalTracerProvider(provider);
  const capture = (env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT ?? '').toLowerCase();
  contentCaptured = capture === 'true' || capture === 'span_only' || capture === 'span_and_event';
  options.logger?.info(
    { endpoint, service: options.service, content: contentCaptured },
    options.exporter ? 'exporting traces' : 'exporting traces over OTLP/HTTP',
  );
  return {
    async flush() {
      await provider.forceFlush();
    },
    async shutdown() {
      try {
        await provider.shutdown();
      } catch (error) {
        options.logger?.warn({ err: error }, `cannot export the last traces: ${errorMessage(error)}`);
      } finally {
        trace.disable();
        contentCaptured = false;
      }
    },
  };
}
