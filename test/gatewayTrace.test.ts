import { submitTask } from '@troupe/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, startHarness } from './support/harness.ts';

const TOKENS = { admin: 'trace-admin-token-0123456789ab', shapedOnly: 'trace-shaped-token-0123456789a' };

/** GET /v1/tasks/{id}/trace of a task with a sub-pipeline: the sub-task's trace nested, as the token may see it. */
describe('the gateway: a trace with its sub-tasks', () => {
  let h: Harness;
  let gateway: Gateway;

  beforeAll(async () => {
    h = await startHarness([fixturePath('shaped.yaml'), fixturePath('outline.yaml')]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
        {
          name: 'shaped-reader',
          sha256: hashToken(TOKENS.shapedOnly),
          scopes: ['read'],
          pipelines: ['shaped'],
        },
      ]),
      port: 0,
    });
    await submitTask(h.bus, 'shaped', { id: 'gw-shaped-1', goal: 'Add an export command' });
    expect((await h.finalOf('gw-shaped-1')).kind).toBe('task.completed');
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  const subTaskOf = async (token: keyof typeof TOKENS) => {
    const response = await fetch(`${gateway.url}/v1/tasks/gw-shaped-1/trace`, {
      headers: { authorization: `Bearer ${TOKENS[token]}` },
    });
    expect(response.status).toBe(200);
    const trace = (await response.json()) as {
      flow: unknown[];
      steps: { step: string; subTask?: unknown }[];
    };
    expect(trace.flow.length).toBeGreaterThan(trace.steps.length);
    return trace.steps.find((s) => s.step === 'sub')?.subTask;
  };

  it('nests the sub-task’s trace in its step', async () => {
    expect(await subTaskOf('admin')).toMatchObject({
      pipeline: 'outline',
      trace: { status: 'completed', steps: [{ step: 'outline', agent: 'outliner' }] },
    });
  });

  it('names, but does not show, a sub-task of a pipeline the token may not touch', async () => {
    const sub = await subTaskOf('shapedOnly');
    expect(sub).toEqual({ taskId: expect.stringMatching(/^gw-shaped-1-sub-1-/), pipeline: 'outline' });
  });
});
