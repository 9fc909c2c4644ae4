import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { FINAL_EVENT_KINDS, subjects, type TroupeEvent } from '@troupe/protocol';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eventsInMessage } from './support/harness.ts';

/** Two agents; version 2 adds a third, served here by a host of its own started by the reload. */
const pipeline = (v2: boolean) => `version: 1
name: hopreload
models:
  scripted: { provider: scripted, script: ./hopreload.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: Write. }
  closer: { instructions: Close up. }${v2 ? '\n  polisher: { instructions: Polish. }' : ''}
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: close, kind: agent, agent: closer }
${v2 ? '  - { id: polish, kind: agent, agent: polisher }\n' : ''}`;

/** Every reply names its version; version 1's writer is slow, so a task of it is at work through the reload. */
const script = (v: string) => `agents:
  writer:
    - { content: written by ${v}, delayMs: ${v === 'v1' ? 2000 : 0} }
  closer:
    - content: closed by ${v}
  polisher:
    - content: polished by ${v}
`;

/**
 * A coordinator that hosts its agents, reloaded with a new version of its pipeline while a task of the old one is
 * at work: the new version's tasks run their steps in-process as the old one's do (none goes on NATS), whether
 * their agent was there before the reload or is new in it, and the old task finishes on its version.
 */
describe('the local hop after a reload', () => {
  let nats: TestNats;
  let bus: NatsBus;
  let coordinator: Coordinator;
  let client: NatsConnection;
  let dir: string;
  const stepRequests: string[] = [];
  const events: TroupeEvent[] = [];
  const file = () => join(dir, 'hopreload.yaml');
  const load = () => loadPipeline(file(), { toolNames: builtinTools().names() });

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-hop-reload-'));
    await writeFile(file(), pipeline(false));
    await writeFile(join(dir, 'hopreload.script.yaml'), script('v1'));
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    bus = await NatsBus.connect({ servers: nats.url, name: 'test-coordinator', logger });
    coordinator = await startCoordinator({
      bus,
      pipelines: [await load()],
      logger,
      workspaceRoot: join(dir, 'workspaces'),
      registry: builtinTools(),
    });
    client = await connect({ servers: nats.url, name: 'test-user' });
    client.subscribe(subjects.agent('hopreload', '>'), {
      callback: (_error, msg) => void stepRequests.push(msg.subject),
    });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => void events.push(...eventsInMessage(msg)),
    });
    await client.flush();
  }, 60_000);
  afterAll(async () => {
    await coordinator?.stop();
    await bus?.close();
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const submit = (id: string) =>
    jetstream(client).publish(subjects.task('hopreload'), JSON.stringify({ id, goal: 'go' }), { msgID: id });
  const outputOf = (taskId: string) =>
    vi.waitFor(
      () => {
        const final = events.find((e) => e.taskId === taskId && FINAL_EVENT_KINDS.includes(e.kind));
        if (!final) throw new Error(`task ${taskId} has not ended yet`);
        expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
        return final.kind === 'task.completed' ? final.data.output : undefined;
      },
      { timeout: 30_000, interval: 50 },
    );

  it('runs the new version’s steps in-process, its new agent’s too, and the old task’s on its version', async () => {
    await submit('old-1');
    await vi.waitFor(
      () => expect(events.some((e) => e.taskId === 'old-1' && e.kind === 'step.started')).toBe(true),
      { timeout: 30_000, interval: 20 },
    );
    await writeFile(file(), pipeline(true));
    await writeFile(join(dir, 'hopreload.script.yaml'), script('v2'));
    const reloaded = await coordinator.reload(await load());
    expect(reloaded.to).not.toBe(reloaded.from);
    // The old task is still at work on its first step: the reload came while it ran.
    expect(events.some((e) => e.taskId === 'old-1' && FINAL_EVENT_KINDS.includes(e.kind))).toBe(false);
    await submit('new-1');
    await submit('new-2');
    expect(await outputOf('new-1')).toBe('polished by v2');
    expect(await outputOf('new-2')).toBe('polished by v2');
    expect(await outputOf('old-1')).toBe('closed by v1');
    expect(events.filter((e) => e.taskId === 'new-1' && e.kind === 'step.completed')).toHaveLength(3);
    // Nine steps ran, none over NATS.
    expect(stepRequests).toEqual([]);
  }, 60_000);

  it('runs in-process the steps of a version another coordinator made the newest, once its first step loaded it', async () => {
    await writeFile(join(dir, 'hopreload.script.yaml'), script('v3'));
    // A coordinator of version 3 registers it as the newest; it hosts no agents, and is gone before a task comes.
    const otherBus = await NatsBus.connect({ servers: nats.url, name: 'test-other', logger: bus.logger });
    const other = await startCoordinator({
      bus: otherBus,
      pipelines: [await load()],
      logger: bus.logger,
      workspaceRoot: join(dir, 'other'),
      registry: builtinTools(),
      hostAgents: false,
    });
    await other.stop();
    await otherBus.close();
    // This coordinator follows the registration at its next read of it, within a second (durability.md, "New
    // tasks"): a task submitted before then starts on version 2, whose steps all run here.
    let submitted = 2;
    const runNew = async () => {
      const id = `new-${++submitted}`;
      await submit(id);
      return outputOf(id);
    };
    await expect.poll(runNew, { timeout: 30_000, interval: 100 }).toBe('polished by v3');
    // Its first step went over NATS (to the host here, which loaded version 3 for it); the next ran here.
    expect(stepRequests).toEqual([subjects.agent('hopreload', 'writer')]);
    expect(await runNew()).toBe('polished by v3');
    expect(stepRequests).toHaveLength(1);
  }, 60_000);
});
