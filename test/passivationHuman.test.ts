import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { listHumanRequests, replyToHuman } from '@troupe/client';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { eventsOf, FINAL_EVENT_KINDS, subjects, type TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath } from './support/harness.ts';

/**
 * Passivation of tasks waiting on a person, over a real nats-server (docs/durability.md, "Passivation"): a coordinator
 * passivating after 300 ms stops the actor trees of tasks whose `human` step waits for an answer
 * (test/fixtures/passivationHuman.yaml); people answer as `troupe answer` does (the answer recorded in KV, then told
 * on the question's subject), and each task wakes, takes its answer and completes, asked once.
 */
describe('passivation of tasks waiting on people', () => {
  const TASKS = 20;
  let nats: TestNats;
  let client: NatsConnection;
  let bus: NatsBus;
  let coordinator: Coordinator;
  let workspaceRoot: string;
  const events: TroupeEvent[] = [];
  const logger = createLogger({ level: 'silent' });
  const of = (taskId: string) => events.filter((e) => e.taskId === taskId);
  const ids = Array.from({ length: TASKS }, (_, i) => `person-${i + 1}`);

  beforeAll(async () => {
    nats = await startTestNats();
    workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-passivation-human-'));
    client = await connect({ servers: nats.url, name: 'passivation-human-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        const parsed = eventsOf(msg.data, msg.subject);
        if (parsed.ok) events.push(...parsed.value);
      },
    });
    await client.flush();
    bus = await NatsBus.connect({ servers: nats.url, name: 'passivating', logger });
    const registry = builtinTools();
    const pipeline = await loadPipeline(fixturePath('passivationHuman.yaml'), {
      toolNames: registry.names(),
    });
    coordinator = await startCoordinator({
      bus,
      pipelines: [pipeline],
      logger,
      workspaceRoot,
      registry,
      ackWaitMs: 1_500,
      passivateAfterMs: 300,
    });
  });
  afterAll(async () => {
    await coordinator?.stop();
    await bus?.close();
    await client?.close();
    await nats?.stop();
    await rm(workspaceRoot, { recursive: true, force: true });
  });

  it('passivates every task asking a person, and completes each on its answer given with `troupe answer`, one question each', async () => {
    for (const id of ids)
      client.publish(subjects.task('people'), JSON.stringify({ id, goal: 'ask, then write' }));
    await expect.poll(() => coordinator.passivated(), { timeout: 20_000 }).toBe(TASKS);
    // A task may be passivated before its question is recorded: its human step counts as waiting from its run's start
    // (docs/durability.md, "Passivation"), and the run goes on outside the stopped tree, recording and announcing the
    // question. `human.asked` goes out once the question is recorded in KV, so each task's is waited on before listing.
    await expect
      .poll(() => ids.filter((id) => of(id).some((e) => e.kind === 'human.asked')), { timeout: 20_000 })
      .toEqual(ids);
    expect(coordinator.passivated()).toBe(TASKS);
    const asked = await listHumanRequests(bus, { pipelines: ['people'] });
    expect(asked.map((r) => r.taskId).sort()).toEqual([...ids].sort());
    for (const request of asked) {
      const replied = await replyToHuman(
        bus,
        request.id,
        { kind: 'question', answer: { answer: `yes to ${request.taskId}`, by: 'ana' } },
        { pipelines: ['people'] },
      );
      expect(replied.status).toBe('answered');
    }
    for (const id of ids) {
      await expect
        .poll(() => of(id).find((e) => FINAL_EVENT_KINDS.includes(e.kind))?.kind, { timeout: 20_000 })
        .toBe('task.completed');
      expect(of(id).filter((e) => e.kind === 'human.asked')).toHaveLength(1);
      expect(of(id).find((e) => e.kind === 'human.answered')?.data).toMatchObject({ answer: `yes to ${id}` });
      expect(of(id).map((e) => e.kind)).not.toContain('task.resumed');
    }
    expect(coordinator.passivated()).toBe(0);
    const all = await listHumanRequests(bus, { pipelines: ['people'], all: true });
    expect(all).toHaveLength(TASKS);
    expect(all.every((r) => r.status === 'answered')).toBe(true);
  }, 60_000);
});
