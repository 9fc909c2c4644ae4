import { type ErrorReply, subjects } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

/**
 * `troupe.steer.<pipeline>.<taskId>`: where a pause, resume or tell goes, so NATS permissions can grant steering for
 * some pipelines' tasks only. It takes nothing else, and no task of another pipeline.
 */
describe('the steering subject', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml'), fixturePath('slowpoke.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  const ask = async (subject: string, message: unknown) =>
    (await h.client.request(subject, JSON.stringify(message), { timeout: 10_000 })).json<ErrorReply>();

  it('takes a pause, resume and tell, refuses a cancel, and knows no task of another pipeline', async () => {
    publishTask(h, 'slowpoke', { id: 'steer-sub-1', goal: 'take your time' });
    await waitUntil(() => kinds(h.eventsOf('steer-sub-1')).includes('llm.request'));

    expect(await ask(subjects.steer('slowpoke', 'steer-sub-1'), { action: 'cancel' })).toEqual({
      ok: false,
      error: {
        code: 'invalid_request',
        message:
          'troupe.steer.slowpoke.steer-sub-1 takes only pause, resume and tell; a cancel or a migration goes on ' +
          'troupe.control.steer-sub-1; nothing was changed',
      },
    });
    expect(await ask(subjects.steer('demo', 'steer-sub-1'), { action: 'pause' })).toMatchObject({
      ok: false,
      error: { code: 'unknown_task' },
    });
    expect(await ask(subjects.steer('slowpoke', 'steer-sub-1'), { action: 'pause', by: 'ana' })).toEqual({
      ok: true,
      taskId: 'steer-sub-1',
      outcome: 'paused',
    });
    expect(await ask(subjects.steer('slowpoke', 'steer-sub-1'), { action: 'resume' })).toMatchObject({
      ok: true,
      outcome: 'resumed',
    });
    expect(kinds(h.eventsOf('steer-sub-1'))).not.toContain('task.cancelled');

    await ask(subjects.control('steer-sub-1'), { action: 'cancel' });
    await h.finalOf('steer-sub-1');
    expect(
      await ask(subjects.steer('slowpoke', 'steer-sub-1'), { action: 'tell', text: 'hi' }),
    ).toMatchObject({
      ok: false,
      error: { code: 'task_ended' },
    });
    expect(await ask(subjects.steer('slowpoke', 'never-was'), { action: 'tell', text: 'hi' })).toMatchObject({
      ok: false,
      error: { code: 'unknown_task' },
    });
  });
});
