import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { STREAMS, subjects } from '@troupe/protocol';
import { createLogger, jetstreamManagerOf, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventOf, fixturePath, type Harness, kinds, publishTask, startHarness } from './support/harness.ts';

describe('a task delivered too often', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('slowpoke.yaml')], { maxDeliver: 1 });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('is given up on: task.failed (max_deliveries) and a copy on the dead-letter subject', async () => {
    publishTask(h, 'slowpoke', { id: 'poison-1', goal: 'never finishes' });
    await eventOf(h, 'poison-1', 'step.started');
    // The coordinator goes away mid-task: that was delivery 1 of the 1 allowed.
    await h.coordinator.stop();

    const logger = createLogger({ level: 'silent' });
    const bus = await NatsBus.connect({ servers: h.nats.url, name: 'next-coordinator', logger });
    const registry = builtinTools();
    const next = await startCoordinator({
      bus,
      pipelines: [await loadPipeline(fixturePath('slowpoke.yaml'), { toolNames: registry.names() })],
      logger,
      workspaceRoot: h.workspaceRoot,
      registry,
      maxDeliver: 1,
    });
    try {
      const final = await h.finalOf('poison-1', 30_000);
      expect(final.kind).toBe('task.failed');
      expect(final.kind === 'task.failed' && final.data.reason).toBe('max_deliveries');
      expect(kinds(h.eventsOf('poison-1'))).not.toContain('task.resumed');

      const jsm = await jetstreamManagerOf(bus);
      const letter = await jsm.streams.getMessage(STREAMS.deadLetters, {
        last_by_subj: subjects.deadLetter('slowpoke'),
      });
      expect(letter?.header?.get('Troupe-Task-Id')).toBe('poison-1');
      expect(letter?.header?.get('Troupe-Reason')).toContain('delivered 1 times without finishing');
      expect(JSON.parse(new TextDecoder().decode(letter?.data))).toMatchObject({
        id: 'poison-1',
        goal: 'never finishes',
      });
    } finally {
      await next.stop();
      await bus.close();
    }
  });
});
