import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type EventOf,
  errorMessage,
  isStepErrorCode,
  type TokenUsage,
  type TroupeEvent,
} from '@troupe/protocol';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Logger } from '../logging/index.ts';
import type { JetStreamBus } from '../transport/bus.ts';

/** Seconds: tasks and steps run from milliseconds (a scripted model) to hours (a person asked). */
const TASK_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3_600, 14_400];
const CALL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Scores run from 0 to 1; a check that holds or not is 0 or 1. */
const SCORE_BUCKETS = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1];

/**
 * The Prometheus metrics of one Troupe process (`troupe up`, `troupe worker`), counted from the events it publishes
 * — so a coordinator counts tasks and steps, a worker the model calls, tool calls and approvals of the steps it runs
 * — and from its NATS connection (reconnects, events waiting for the stream). Through `prom-client`, the Node
 * client the Prometheus ecosystem maintains; the process's own metrics (CPU, memory, event loop lag) come with it.
 */
export class TroupeMetrics {
  readonly registry = new Registry();
  readonly #tasks = this.#counter('troupe_tasks_total', 'Tasks ended, by pipeline and outcome.', [
    'pipeline',
    'outcome',
  ]);
  readonly #failures = this.#counter(
    'troupe_task_failures_total',
    'Tasks failed, by pipeline and reason (max_deliveries: dead-lettered).',
    ['pipeline', 'reason'],
  );
  readonly #deadLetters = this.#counter(
    'troupe_dead_letters_total',
    'Tasks given up on after deliveries that made no progress, stored on troupe.deadletter.<pipeline>.',
    ['pipeline'],
  );
  readonly #taskSeconds = new Histogram({
    name: 'troupe_task_duration_seconds',
    help: 'How long tasks took, from acceptance to their end, by pipeline and outcome.',
    labelNames: ['pipeline', 'outcome'],
    buckets: TASK_BUCKETS,
    registers: [this.registry],
  });
  readonly #steps = this.#counter(
    'troupe_steps_total',
    'Agent steps ended, by pipeline, agent and outcome.',
    ['pipeline', 'agent', 'outcome'],
  );
  readonly #stepSeconds = new Histogram({
    name: 'troupe_step_duration_seconds',
    help: 'How long agent steps took, as the workflow saw them, by pipeline and agent.',
    labelNames: ['pipeline', 'agent'],
    buckets: TASK_BUCKETS,
    registers: [this.registry],
  });
  readonly #modelCalls = this.#counter(
    'troupe_model_calls_total',
    'Model calls made, summaries of long conversations included (replies replayed from the step journal not counted), by provider, model and outcome.',
    ['provider', 'model', 'outcome'],
  );
  readonly #modelSeconds = new Histogram({
    name: 'troupe_model_call_duration_seconds',
    help: 'How long model calls took, retries and fallbacks included, by provider and model.',
    labelNames: ['provider', 'model'],
    buckets: CALL_BUCKETS,
    registers: [this.registry],
  });
  readonly #tokens = this.#counter(
    'troupe_model_tokens_total',
    'Tokens, by provider, model and type (input: the whole prompt, cache reads and writes included; cached: read from the prompt cache; cache_write: written to it; output).',
    ['provider', 'model', 'type'],
  );
  readonly #cost = this.#counter(
    'troupe_model_cost_usd_total',
    "Cost in USD by the pipelines' price tables, by provider and model.",
    ['provider', 'model'],
  );
  readonly #retries = this.#counter(
    'troupe_model_retries_total',
    'Model calls retried, by provider, model and error code.',
    ['provider', 'model', 'code'],
  );
  readonly #fallbacks = this.#counter(
    'troupe_model_fallbacks_total',
    'Model calls passed to a fallback model, by the model that kept failing and the one tried next.',
    ['from', 'to'],
  );
  readonly #toolCalls = this.#counter(
    'troupe_tool_calls_total',
    'Tool calls (results replayed from the journal not counted), by tool, permission decision and outcome.',
    ['tool', 'decision', 'outcome'],
  );
  readonly #approvals = this.#counter(
    'troupe_approvals_total',
    'Approvals decided, by decision (expired: nobody decided in time).',
    ['decision'],
  );
  readonly #evalScores = new Histogram({
    name: 'troupe_eval_score',
    help: "Online scores of sampled tasks (a pipeline's `evals:`), 0 to 1, by pipeline and scorer.",
    labelNames: ['pipeline', 'scorer'],
    buckets: SCORE_BUCKETS,
    registers: [this.registry],
  });
  readonly #evalChecks = this.#counter(
    'troupe_eval_checks_total',
    'Online scores of sampled tasks, by pipeline, scorer and result (error: the scorer, or with scorer "(all)" the scoring of the run, failed).',
    ['pipeline', 'scorer', 'result'],
  );
  readonly #pendingSources = new Set<() => number>();
  readonly #pending: Gauge = new Gauge({
    name: 'troupe_approvals_pending',
    help: 'Approvals and questions the steps running in this process are waiting on now.',
    registers: [this.registry],
    collect: (): void => {
      let count = 0;
      for (const source of this.#pendingSources) count += source();
      this.#pending.set(count);
    },
  });
  readonly #reconnects = this.#counter('troupe_nats_reconnects_total', 'Reconnects to the NATS server.', []);
  readonly #backlog: Gauge = new Gauge({
    name: 'troupe_event_outbox_backlog',
    help: 'Events published but not yet stored by the EVENTS stream.',
    registers: [this.registry],
    // Read when scraped: the outbox's size then.
    collect: (): void => this.#backlog.set(this.#bus?.pendingEvents ?? 0),
  });
  #bus: JetStreamBus | undefined;

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /** Adds to `troupe_approvals_pending` what a human gate waits on (read when scraped); returns how to stop. */
  countPending(source: () => number): () => void {
    this.#pendingSources.add(source);
    return () => this.#pendingSources.delete(source);
  }

  /** Counts what `bus` publishes and what happens to its connection; returns how to stop. */
  watch(bus: JetStreamBus): () => void {
    this.#bus = bus;
    const stopEvents = bus.onEventPublished((event) => this.observe(event));
    const stopStatus = bus.onStatus((status) => {
      if (status.type === 'reconnect') this.#reconnects.inc();
    });
    return () => {
      stopEvents();
      stopStatus();
      if (this.#bus === bus) this.#bus = undefined;
    };
  }

  /** Counts one event. */
  observe(event: TroupeEvent): void {
    const pipeline = event.pipeline;
    switch (event.kind) {
      case 'task.completed':
        this.#taskEnded(pipeline, 'completed', event.data.durationMs);
        break;
      case 'task.failed':
        this.#taskEnded(pipeline, 'failed', event.data.durationMs);
        this.#failures.inc({ pipeline, reason: event.data.reason });
        if (event.data.reason === 'max_deliveries') this.#deadLetters.inc({ pipeline });
        break;
      case 'task.cancelled':
        this.#tasks.inc({ pipeline, outcome: 'cancelled' });
        break;
      case 'step.completed': {
        const { agent, ok, error, durationMs } = event.data;
        this.#steps.inc({ pipeline, agent, outcome: ok ? 'ok' : (error?.code ?? 'failed') });
        this.#stepSeconds.observe({ pipeline, agent }, durationMs / 1000);
        break;
      }
      case 'llm.response': {
        const d = event.data;
        if (!d.journaled) this.#modelCall(d.provider, d.model, d.usage, d.costUsd, d.durationMs);
        break;
      }
      case 'context.compacted': {
        // A summary is a model call too; events from before it said who answered cannot be counted.
        const d = event.data;
        if (!d.journaled && d.provider && d.model && d.usage)
          this.#modelCall(d.provider, d.model, d.usage, d.costUsd ?? 0, d.durationMs ?? 0);
        break;
      }
      case 'session.compacted': {
        const d = event.data;
        this.#modelCall(d.provider, d.model, d.usage, d.costUsd, d.durationMs);
        break;
      }
      case 'llm.error':
        this.#modelCalls.inc({
          provider: event.data.provider,
          model: event.data.model,
          // Step error codes are a closed set (model faults among them); a socket's own code is not.
          outcome: isStepErrorCode(event.data.code) ? event.data.code : 'other',
        });
        break;
      case 'llm.retry':
        this.#retries.inc({ provider: event.data.provider, model: event.data.model, code: event.data.code });
        break;
      case 'llm.fallback':
        this.#fallbacks.inc({ from: event.data.from, to: event.data.to });
        break;
      case 'tool.result': {
        const d = event.data;
        if (d.journaled) break;
        this.#toolCalls.inc({
          tool: d.tool,
          decision: d.decision,
          outcome: d.ok ? 'ok' : (d.error?.code ?? 'error'),
        });
        break;
      }
      case 'approval.decided':
        this.#approvals.inc({ decision: event.data.expired ? 'expired' : event.data.decision });
        break;
      case 'eval.scored':
        this.#scored(pipeline, event.data);
        break;
      default:
        break;
    }
  }

  #modelCall(provider: string, model: string, usage: TokenUsage, costUsd: number, durationMs: number): void {
    const labels = { provider, model };
    this.#modelCalls.inc({ ...labels, outcome: 'ok' });
    this.#modelSeconds.observe(labels, durationMs / 1000);
    this.#tokens.inc({ ...labels, type: 'input' }, usage.inputTokens);
    this.#tokens.inc({ ...labels, type: 'output' }, usage.outputTokens);
    this.#tokens.inc({ ...labels, type: 'cached' }, usage.cachedTokens);
    this.#tokens.inc({ ...labels, type: 'cache_write' }, usage.cacheWriteTokens ?? 0);
    this.#cost.inc(labels, costUsd);
  }

  #scored(pipeline: string, scored: EventOf<'eval.scored'>['data']): void {
    if (scored.error !== undefined) this.#evalChecks.inc({ pipeline, scorer: '(all)', result: 'error' });
    for (const { scorer, value, pass, error } of scored.scores) {
      this.#evalScores.observe({ pipeline, scorer }, value);
      // A scorer that threw or timed out is marked so (scoreRun): an error, not a failed check. Its reason is not
      // read: a module scorer may well answer `error: no citation` as why a case failed.
      const result = error ? 'error' : pass ? 'pass' : 'fail';
      this.#evalChecks.inc({ pipeline, scorer, result });
    }
  }

  #taskEnded(pipeline: string, outcome: string, durationMs: number): void {
    this.#tasks.inc({ pipeline, outcome });
    this.#taskSeconds.observe({ pipeline, outcome }, durationMs / 1000);
  }

  #counter<L extends string>(name: string, help: string, labelNames: readonly L[]): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }
}

/** Where a metrics server listens: `9464` or `127.0.0.1:9464` or `0.0.0.0:9464`; the host is 127.0.0.1 by default. */
export function parseListen(text: string): { host: string; port: number } | undefined {
  const match = /^(?:(.+):)?(\d{1,5})$/.exec(text.trim());
  const port = Number(match?.[2]);
  if (!match || !Number.isInteger(port) || port > 65_535) return undefined;
  // `[::1]:9464`: the brackets only set an IPv6 address apart from its port.
  const host = match[1]?.replace(/^\[(.*)\]$/, '$1') ?? '127.0.0.1';
  return host === '' ? undefined : { host, port };
}

export interface MetricsServer {
  /** `http://host:port/metrics`. */
  url: string;
  close(): Promise<void>;
}

/** Serves `GET /metrics` in the Prometheus text format. */
export async function serveMetrics(
  metrics: TroupeMetrics,
  listen: { host: string; port: number },
  logger?: Logger,
): Promise<MetricsServer> {
  const server: Server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: metrics are at /metrics\n');
      return;
    }
    metrics.registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      (error: unknown) => {
        logger?.warn({ err: error }, 'cannot collect metrics');
        response
          .writeHead(500, { 'content-type': 'text/plain' })
          .end(`cannot collect metrics: ${errorMessage(error)}\n`);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // Serving metrics never keeps a process alive by itself: one whose work failed to start still exits.
  server.unref();
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
