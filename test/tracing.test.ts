import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
  startTestNats,
  type TestNats,
} from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { fixturePath } from './support/harness.ts';

/**
 * One task, three processes: the workflow in `troupe up --no-agents`, the planner and reviewer in one `troupe
 * worker`, the executor in another. Each exports its spans over OTLP/HTTP to a receiver in this process; together
 * they make one trace.
 */
describe('OpenTelemetry traces across processes', () => {
  let nats: TestNats;
  let receiver: OtlpReceiver;
  let home: string;
  const processes: CliProcess[] = [];

  const traced = (instance: string, extra: Record<string, string> = {}) =>
    cliEnv({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_RESOURCE_ATTRIBUTES: `service.instance.id=${instance}`,
      // Export within 100 ms of a span's end, not the default 5 s.
      OTEL_BSP_SCHEDULE_DELAY: '100',
      ...extra,
    });
  const start = (args: string[], env: NodeJS.ProcessEnv) => {
    const p = startTroupe([...args, '--server', nats.url, '--home', home], env);
    processes.push(p);
    return p;
  };

  beforeAll(async () => {
    nats = await startTestNats();
    receiver = await startOtlpReceiver();
    home = await mkdtemp(join(tmpdir(), 'troupe-traces-'));
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGTERM');
    await receiver?.stop();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('makes one connected trace of a task whose workflow and agents run in three processes', async () => {
    const file = fixturePath('traced.yaml');
    const up = start(['up', file, '--no-agents'], traced('coordinator'));
    const plans = start(['worker', file, '--agents', 'planner,reviewer'], traced('worker-a'));
    const executes = start(['worker', file, '--agents', 'executor'], traced('worker-b'));
    await Promise.all([up.waitFor(/troupe is up/), plans.waitFor(/serving/), executes.waitFor(/serving/)]);

    const submitted = await troupe(
      [
        'submit',
        'traced',
        'write out.txt',
        '--id',
        'traced-1',
        '--wait',
        '--server',
        nats.url,
        '--home',
        home,
      ],
      cliEnv(),
      60_000,
    );
    expect(submitted.code, submitted.stderr).toBe(0);

    const named = (name: string) => receiver.spans.filter((s) => s.name === name);
    // The workflow's span ends once the task has: the last to arrive.
    await expect.poll(() => named('invoke_workflow traced').length, { timeout: 20_000 }).toBe(1);
    // The workflow, three agent steps, four model calls, one tool call.
    await expect.poll(() => receiver.spans.length, { timeout: 10_000 }).toBe(9);
    expect(receiver.refused).toEqual([]);
    const spans = receiver.spans;

    const [workflow] = named('invoke_workflow traced') as [ReceivedSpan];
    // One trace: the task's; the workflow's first run is its root.
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([workflow.traceId]));
    expect(workflow.parentSpanId).toBeUndefined();
    expect(workflow.resource).toMatchObject({
      'service.name': 'troupe-coordinator',
      'service.instance.id': 'coordinator',
    });
    expect(workflow.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_workflow',
      'gen_ai.workflow.name': 'traced',
      'troupe.task.id': 'traced-1',
      'troupe.task.status': 'completed',
    });

    const agentSpan = (agent: string) => {
      const found = named(`invoke_agent ${agent}`);
      expect(found, agent).toHaveLength(1);
      return found[0] as ReceivedSpan;
    };
    const planner = agentSpan('planner');
    const executor = agentSpan('executor');
    const reviewer = agentSpan('reviewer');
    for (const [span, instance] of [
      [planner, 'worker-a'],
      [executor, 'worker-b'],
      [reviewer, 'worker-a'],
    ] as const) {
      expect(span.parentSpanId).toBe(workflow.spanId);
      expect(span.kind).toBe(1);
      expect(span.resource).toMatchObject({
        'service.name': 'troupe-worker',
        'service.instance.id': instance,
      });
      expect(span.attributes).toMatchObject({
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.provider.name': 'scripted',
        'gen_ai.conversation.id': 'traced-1',
      });
    }

    // Each model call is a client span under its agent's, with its usage.
    const chats = spans.filter((s) => s.name.startsWith('chat '));
    expect(chats.map((c) => c.parentSpanId).sort()).toEqual(
      [planner.spanId, executor.spanId, executor.spanId, reviewer.spanId].sort(),
    );
    for (const chat of chats) {
      expect(chat.kind).toBe(3);
      expect(chat.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'scripted',
      });
      expect(chat.attributes['gen_ai.usage.input_tokens']).toEqual(expect.any(Number));
      expect(chat.attributes['gen_ai.response.finish_reasons']).toEqual([expect.any(String)]);
      // Message content is opt-in.
      expect(chat.attributes).not.toHaveProperty('gen_ai.input.messages');
    }

    const [tool, ...moreTools] = named('execute_tool write_file');
    expect(moreTools).toEqual([]);
    expect(tool?.parentSpanId).toBe(executor.spanId);
    expect(tool?.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'write_file',
      'troupe.tool.decision': 'allow',
    });
    expect(tool?.attributes).not.toHaveProperty('gen_ai.tool.call.arguments');
    expect(tool?.status.code).not.toBe(2);
  });
});
