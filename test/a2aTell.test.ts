import { Role } from '@a2a-js/sdk';
import { RequestMalformedError, UnsupportedOperationError } from '@a2a-js/sdk/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type A2aEnv,
  a2aClient,
  asTask,
  BINDINGS,
  data,
  send,
  startA2aEnv,
  stateName,
  text,
} from './support/a2aServer.ts';
import { kinds, ofKind, waitUntil } from './support/harness.ts';

/**
 * A message an A2A client sends to a task that is working and asks nothing is a `troupe tell`: the agent at work
 * reads it before its next model call, and it stands in the task's history as the user's.
 */
describe('the A2A server tells a working task what a message to it says', () => {
  let env: A2aEnv;

  beforeAll(async () => {
    env = await startA2aEnv();
  });
  afterAll(async () => {
    await env?.stop();
  });

  it.each(BINDINGS)('over %s, with the official client', async (binding) => {
    const client = await a2aClient(env, 'slowpoke', binding);
    const task = asTask(
      await client.sendMessage(send([text('take your time')], { returnImmediately: true })),
    );
    await waitUntil(() => kinds(env.h.eventsOf(task.id)).includes('llm.request'));

    const request = send([text('use the v2 API, not v1')], {
      taskId: task.id,
      contextId: task.contextId,
      returnImmediately: true,
    });
    const told = asTask(await client.sendMessage(request));
    expect(told.id).toBe(task.id);
    expect(stateName(told.status?.state)).toBe('WORKING');
    await waitUntil(() => ofKind(env.h.eventsOf(task.id), 'task.told').length === 1);
    // Sent again (its answer lost, say): the same messageId is the same tell, so the task is told once.
    expect(stateName(asTask(await client.sendMessage(request)).status?.state)).toBe('WORKING');
    expect(ofKind(env.h.eventsOf(task.id), 'task.told')[0]?.data).toMatchObject({
      text: 'use the v2 API, not v1',
      by: 'ops',
    });
    await expect
      .poll(async () =>
        (await client.getTask({ id: task.id, tenant: '' })).history
          .filter((m) => m.role === Role.ROLE_USER)
          .map((m) => (m.parts[0]?.content?.$case === 'text' ? m.parts[0].content.value : undefined)),
      )
      .toEqual(['take your time', 'use the v2 API, not v1']);

    // A told message is text: the task's input was set when it started.
    const withData = await client
      .sendMessage(send([data({ version: 2 })], { taskId: task.id, contextId: task.contextId }))
      .catch((e: unknown) => e);
    expect(withData).toBeInstanceOf(RequestMalformedError);

    await client.cancelTask({ id: task.id, tenant: '', metadata: undefined });
    await env.h.finalOf(task.id);
    const late = await client
      .sendMessage(send([text('too late')], { taskId: task.id, contextId: task.contextId }))
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(UnsupportedOperationError);
    expect(ofKind(env.h.eventsOf(task.id), 'task.told')).toHaveLength(1);
  });
});
