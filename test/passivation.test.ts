import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import {
  BUCKETS,
  eventsOf,
  FINAL_EVENT_KINDS,
  subjects,
  type TroupeEvent,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, KvStore, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, repoRoot } from './support/harness.ts';

/**
 * Passivation over a real nats-server (docs/durability.md, "Passivation"): a coordinator with `passivateAfterMs`
 * stops the actor tree of a task whose step waits on its model (test/fixtures/passivation.yaml: 2.5 s) and restores
 * it when the reply comes; a kill -9 of a coordinator while its task is passivated leaves the task to be resumed from
 * its record, as a kill of a live one does.
 */
describe('passivation', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let workspaceRoot: string;
  const events: TroupeEvent[] = [];
  const stops: (() => Promise<void>)[] = [];
  const children: ChildProcess[] = [];
  const logger = createLogger({ level: 'silent' });
  const of = (taskId: string) => events.filter((e) => e.taskId === taskId);
  const finalOf = async (taskId: string) => {
    await expect
      .poll(() => of(taskId).some((e) => FINAL_EVENT_KINDS.includes(e.kind)), { timeout: 30_000 })
      .toBe(true);
    return of(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind));
  };
  const submit = (id: string) =>
    client.publish(subjects.task('passivation'), JSON.stringify({ id, goal: 'think, then write' }));

  /** An in-process coordinator hosting the pipeline's agents, passivating after `passivateAfterMs` if given. */
  const coordinator = async (name: string, passivateAfterMs?: number): Promise<Coordinator> => {
    const bus = await NatsBus.connect({ servers: nats.url, name, logger });
    const registry = builtinTools();
    const pipeline = await loadPipeline(fixturePath('passivation.yaml'), { toolNames: registry.names() });
    const started = await startCoordinator({
      bus,
      pipelines: [pipeline],
      logger,
      workspaceRoot,
      registry,
      ackWaitMs: 1_500,
      ...(passivateAfterMs === undefined ? {} : { passivateAfterMs }),
    });
    stops.push(async () => {
      await started.stop();
      await bus.close();
    });
    return started;
  };

  beforeAll(async () => {
    nats = await startTestNats();
    workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-passivation-'));
    client = await connect({ servers: nats.url, name: 'passivation-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        const parsed = eventsOf(msg.data, msg.subject);
        if (parsed.ok) events.push(...parsed.value);
      },
    });
    await client.flush();
  });
  afterEach(async () => {
    for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
    for (const stop of stops.splice(0)) await stop();
  });
  afterAll(async () => {
    await client?.close();
    await nats?.stop();
    await rm(workspaceRoot, { recursive: true, force: true });
  });

  it('passivates a task waiting on its model and completes it on the reply, the step run once', async () => {
    const here = await coordinator('passivating', 300);
    // The agents are hosted here, so each step runs in-process: a step request over NATS would be a send again.
    const overNats: string[] = [];
    const requests = client.subscribe(subjects.agent('passivation', '*'), {
      callback: (_error, msg) => void overNats.push(msg.subject),
    });
    await client.flush();
    submit('wait-1');
    await expect.poll(() => here.passivated(), { timeout: 10_000 }).toBe(1);
    // Its step is parked on the agent host here too, after the same 300 ms (the host's own default is 5 s, longer than
    // the model's 2.5 s).
    await expect.poll(() => here.parkedSteps(), { timeout: 10_000 }).toBe(1);
    const final = await finalOf('wait-1');
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Written down.' } });
    expect(here.passivated()).toBe(0);
    expect(here.parkedSteps()).toBe(0);
    // The host ran the step once: one start, one model call; the woken task adopted the send in flight.
    const think = of('wait-1').filter((e) => 'step' in e.data && e.data.step === 'think');
    expect(think.filter((e) => e.kind === 'step.started')).toHaveLength(1);
    expect(of('wait-1').filter((e) => e.kind === 'llm.request' && e.from === 'thinker')).toHaveLength(1);
    expect(of('wait-1').map((e) => e.kind)).not.toContain('task.resumed');
    await client.flush();
    requests.unsubscribe();
    expect(overNats).toEqual([]);
    const workflows = await KvStore.open(
      await NatsBus.connect({ servers: nats.url, name: 'reader', logger }),
      BUCKETS.workflows,
      WorkflowRecord,
    );
    expect((await workflows.get('wait-1'))?.value).toMatchObject({ status: 'completed' });
  }, 60_000);

  it('resumes a task from its record after a kill -9 of the coordinator that had passivated it', async () => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fixturePath('passivatingCoordinator.ts'),
        nats.url,
        fixturePath('passivation.yaml'),
        workspaceRoot,
      ],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    children.push(child);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    await expect.poll(() => output, { timeout: 30_000 }).toContain('ready');
    submit('kill-1');
    await expect.poll(() => output, { timeout: 10_000 }).toContain('passivated 1');
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    // Another coordinator gets the task once the dead one's ack wait has passed, and resumes it from its record.
    await coordinator('survivor');
    const final = await finalOf('kill-1');
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Written down.' } });
    const kinds = of('kill-1').map((e) => e.kind);
    expect(kinds).toContain('task.resumed');
    expect(kinds.filter((k) => k === 'task.completed')).toHaveLength(1);
  }, 90_000);
});
