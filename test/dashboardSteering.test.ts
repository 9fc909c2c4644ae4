/// <reference lib="dom" />
// The dashboard's steering controls in a real browser against a real gateway: pause, resume, tell, restart from a
// step, fork from a step, and a task's family. Each control's states (in flight, refused with 403, 409 or 503,
// answered) are driven by answering its request in the browser (playwright's page.route), so every state is seen
// whatever the coordinator does; what the timeline shows of a hold and a told message comes from real events.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { subjects } from '@troupe/protocol';
import { createLogger, EventFactory } from '@troupe/runtime';
import { type Browser, chromium, type Page, type Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshotAtRest } from './support/dashboard.ts';
import { eventOf, examplePath, fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** Debian's chromium (`.ci/run` and `npm test` install it when missing); CHROMIUM_PATH names another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ADMIN = 'steering-admin-0123456789abcdef';
const APPROVER = 'steering-approver-0123456789abcd';
const SUBMITTER = 'steering-submitter-0123456789abc';
const SHOTS = join(import.meta.dirname, '..', 'docs', 'img');
const shot = (name: string) => join(SHOTS, `${name}.png`);
const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

/** Answers a request as the gateway answers: JSON, or its `{error: {code, message}}`. */
const answer = (route: Route, status: number, body: unknown) =>
  route.fulfill({ status, contentType: 'application/json', body: JSON.stringify(body) });
const refuse = (route: Route, status: number, code: string, message: string) =>
  answer(route, status, { error: { code, message } });

/** A request held until `release` is called: the control's in-flight state can be looked at meanwhile. */
function held() {
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { released, release: () => release() };
}

describe('the dashboard’s steering controls, in a real browser', () => {
  let h: Harness;
  let gateway: Gateway;
  let browser: Browser;
  let page: Page;
  /** A gated task, parked on its approval: running, for as long as the tests need. */
  let running = '';
  /** A demo task that completed: plan, execute, review. */
  let completed = '';

  const api = async <T>(path: string, body?: unknown, token = ADMIN): Promise<T> => {
    const response = await fetch(`${gateway.url}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return (await response.json()) as T;
  };
  async function signIn(on: Page, token: string) {
    await on.goto(gateway.url);
    await on.getByTestId('token').fill(token);
    await on.getByRole('button', { name: 'Open' }).click();
    await on.getByTestId('live').filter({ hasText: 'live' }).waitFor();
  }
  /** Shows a task: its pipeline chosen, its row clicked, its timeline loaded. */
  async function open(on: Page, pipeline: string, taskId: string) {
    await on.getByTestId('pipeline').selectOption(pipeline);
    await on.locator(`[data-testid=task-row][data-task="${taskId}"]`).click();
    await expect.poll(() => on.getByTestId('timeline').locator('h3').textContent()).toContain(taskId);
  }

  beforeAll(async () => {
    h = await startHarness([fixturePath('gated.yaml'), examplePath('demo.yaml')]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] },
        { name: 'oncall', sha256: hashToken(APPROVER), scopes: ['approve'] },
        { name: 'ci', sha256: hashToken(SUBMITTER), scopes: ['submit'] },
      ]),
      port: 0,
    });
    await mkdir(SHOTS, { recursive: true });
    running = (await api<{ taskId: string }>('/v1/pipelines/gated/tasks', { goal: 'release v10' })).taskId;
    completed = (
      await api<{ taskId: string; status: string }>('/v1/pipelines/demo/tasks?wait=30', { goal: 'hello.md' })
    ).taskId;
    await eventOf(h, running, 'approval.requested');
    // Tests run as root in CI containers, where Chromium's own sandbox cannot start.
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await signIn(page, ADMIN);
  }, 90_000);
  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    await h?.stop();
  });

  it('pauses, resumes and tells a running task through the gateway and its coordinator, the timeline following', async () => {
    const taskId = (await api<{ taskId: string }>('/v1/pipelines/gated/tasks', { goal: 'release v11' }))
      .taskId;
    await eventOf(h, taskId, 'approval.requested');
    await open(page, 'gated', taskId);
    const steering = page.getByTestId('steering');
    await page.getByTestId('pause-reason').fill('wrong API');
    await page.getByTestId('pause').click();
    await expect.poll(() => steering.getAttribute('data-paused'), { timeout: 15_000 }).toBe('true');
    // The task's view says who holds it, once the page has read it again.
    await expect
      .poll(() => page.getByTestId('paused-note').textContent(), { timeout: 15_000 })
      .toMatch(/^Paused .* ago by ops: wrong API$/);
    await expect
      .poll(() => page.locator(`[data-testid=task-row][data-task="${taskId}"]`).getAttribute('data-paused'))
      .toBe('true');
    const steer = page.getByTestId('timeline-steer');
    await expect
      .poll(() => steer.allTextContents(), { timeout: 15_000 })
      .toEqual(['paused by ops at work: wrong API']);
    // The flow graph lights its step as paused, not as waiting for the approval it was parked on.
    const lit = page.getByTestId('flow-graph').locator('text.doing');
    await expect.poll(() => lit.allTextContents(), { timeout: 15_000 }).toEqual(['paused']);
    expect(await page.getByTestId('timeline').locator('h3 .status').textContent()).toBe('paused');
    await screenshotAtRest(page, shot('dashboard-paused'));
    await page.getByTestId('resume').click();
    await page.getByTestId('pause').waitFor({ timeout: 15_000 });
    await expect.poll(() => page.getByTestId('timeline').locator('h3 .status').textContent()).toBe('running');
    // Resumed, it shows what it was doing again: still waiting for its approval.
    await expect.poll(() => lit.allTextContents(), { timeout: 15_000 }).toEqual(['waiting for approval']);
    await expect
      .poll(() => steer.allTextContents(), { timeout: 15_000 })
      .toEqual([
        'paused by ops at work: wrong API',
        expect.stringMatching(/^resumed by ops at work after .* paused$/),
      ]);
    await page.getByTestId('tell-text').fill('ship it as v11.0.1');
    await page.getByTestId('tell').click();
    let messageId = '';
    await expect
      .poll(
        async () =>
          (messageId =
            (await page.getByTestId('told-receipt').textContent())?.match(/message (\S+) is recorded/)?.[1] ??
            ''),
        { timeout: 15_000 },
      )
      .not.toBe('');
    await expect
      .poll(() => steer.allTextContents(), { timeout: 15_000 })
      .toContain(`told ${messageId} by ops: ship it as v11.0.1`);
    expect(ofKind(h.eventsOf(taskId), 'task.paused')).toHaveLength(1);
    expect(ofKind(h.eventsOf(taskId), 'task.resumed').filter((e) => e.data.after === 'pause')).toHaveLength(
      1,
    );
    expect(ofKind(h.eventsOf(taskId), 'task.told').map((e) => e.data.messageId)).toEqual([messageId]);
    // Approved from the page, the agent goes on: its next model call reads the message first, and the timeline says so.
    await page.locator('[data-testid=request]').filter({ hasText: taskId }).getByTestId('approve').click();
    await expect
      .poll(() => page.getByTestId('timeline-told').allTextContents(), { timeout: 30_000 })
      .toEqual([`read ${messageId} “ship it as v11.0.1” before turn 2`]);
    const read = ofKind(h.eventsOf(taskId), 'agent.told');
    expect(read.map((e) => e.data.messageIds)).toEqual([[messageId]]);
    // Ended, it is steered no more: the controls go.
    await expect
      .poll(() => page.getByTestId('timeline').locator('h3 .status').textContent(), { timeout: 30_000 })
      .toBe('completed');
    expect(await steering.count()).toBe(0);
  });

  it('restarts a cancelled task and forks a finished one through the gateway: each new task links back', async () => {
    const cancelled = (await api<{ taskId: string }>('/v1/pipelines/gated/tasks', { goal: 'release v12' }))
      .taskId;
    await eventOf(h, cancelled, 'approval.requested');
    await api(`/v1/tasks/${cancelled}/cancel`, { reason: 'to restart it' });
    await eventOf(h, cancelled, 'task.cancelled');
    await open(page, 'gated', cancelled);
    await expect.poll(() => page.getByTestId('restart-step').inputValue()).toBe('work');
    await page.getByTestId('restart').click();
    const restarted = page.getByTestId('restarted');
    await expect
      .poll(() => restarted.textContent(), { timeout: 15_000 })
      .toMatch(/^Started [tk]-\S+, a restart of this task from work\.$/);
    const made = (await restarted.getByTestId('new-task').getAttribute('data-task')) ?? '';
    await restarted.getByTestId('new-task').click();
    await expect
      .poll(() => page.getByTestId('origin').textContent(), { timeout: 15_000 })
      .toMatch(new RegExp(`^A restart of ${cancelled} from step work`));
    await eventOf(h, made, 'approval.requested');
    expect(ofKind(h.eventsOf(made), 'task.accepted')[0]?.data.origin).toMatchObject({
      taskId: cancelled,
      kind: 'restart',
      step: 'work',
    });
    await page.getByTestId('origin-link').click();
    await expect
      .poll(() => page.getByTestId('descendants').textContent(), { timeout: 15_000 })
      .toBe(`Made from it: ${made} (restart from work)`);
    await api(`/v1/tasks/${made}/cancel`, {});

    // A fork of the finished demo task at review, with execute's output replaced: plan and execute are not run again.
    await open(page, 'demo', completed);
    await page.locator('[data-testid=fork-open][data-step=review]').click();
    const form = page.locator('[data-testid=fork-form][data-step=review]');
    await form
      .locator('[data-testid=fork-output][data-step=execute]')
      .fill('Wrote notes/hello.md with a sign-off line.');
    await form.getByTestId('fork').click();
    const forked = form.getByTestId('forked');
    await expect
      .poll(() => forked.textContent(), { timeout: 15_000 })
      .toMatch(/^Started [tk]-\S+, a fork of this task at review\.$/);
    const fork = (await forked.getByTestId('new-task').getAttribute('data-task')) ?? '';
    await forked.getByTestId('new-task').click();
    await expect
      .poll(() => page.getByTestId('origin').textContent(), { timeout: 15_000 })
      .toMatch(new RegExp(`^A fork of ${completed} from step review`));
    const reused = page.locator('[data-testid=timeline-step][data-step=plan] .step-head');
    await expect
      .poll(() => reused.textContent(), { timeout: 30_000 })
      .toContain('reused from the original, not run again');
    expect(ofKind(h.eventsOf(fork), 'task.accepted')[0]?.data.origin).toMatchObject({
      taskId: completed,
      kind: 'fork',
      step: 'review',
    });
    // Neither reused step asked its model again.
    const asked = ofKind(h.eventsOf(fork), 'llm.request').map((e) => e.data.agent);
    expect(asked).not.toContain('planner');
  }, 90_000);

  it('pauses: the button is disabled while the request is in flight, and a 409 is shown beside it', async () => {
    await open(page, 'gated', running);
    const pause = page.getByTestId('pause');
    const request = held();
    await page.route(`**/v1/tasks/${running}/pause`, async (route) => {
      await request.released;
      await refuse(route, 409, 'conflict', `task ${running} is paused already`);
    });
    await pause.click();
    await expect.poll(() => pause.isDisabled()).toBe(true);
    request.release();
    await expect
      .poll(() => page.getByTestId('hold-refused').textContent())
      .toBe(
        `Pause refused (409): task ${running} is paused already — the task’s state does not allow it now`,
      );
    expect(await pause.isDisabled()).toBe(false);
    await page.unrouteAll({ behavior: 'wait' });
  });

  it('pauses, then offers Resume; a 503 on resume says nobody runs the task now', async () => {
    let sent: unknown;
    await page.route(`**/v1/tasks/${running}/pause`, (route) => {
      sent = route.request().postDataJSON();
      return answer(route, 200, { taskId: running, status: 'paused' });
    });
    await page.getByTestId('pause-reason').fill('  wrong API ');
    await page.getByTestId('pause').click();
    await page.getByTestId('resume').waitFor();
    expect(sent).toEqual({ reason: 'wrong API' });
    expect(await page.getByTestId('hold-refused').count()).toBe(0);
    expect(await page.getByTestId('steering').getAttribute('data-paused')).toBe('true');
    await page.route(`**/v1/tasks/${running}/resume`, (route) =>
      refuse(route, 503, 'unavailable', `no coordinator runs task ${running} right now`),
    );
    await page.getByTestId('resume').click();
    await expect
      .poll(() => page.getByTestId('hold-refused').textContent())
      .toContain('Resume refused (503): no coordinator runs task');
    expect(await page.getByTestId('hold-refused').textContent()).toContain(
      'nobody runs the task at the moment: try again later',
    );
    // Still held, as far as the page knows: Resume stays.
    await page.unroute(`**/v1/tasks/${running}/resume`);
    await page.route(`**/v1/tasks/${running}/resume`, (route) =>
      answer(route, 200, { taskId: running, status: 'running' }),
    );
    await page.getByTestId('resume').click();
    await page.getByTestId('pause').waitFor();
    // Without a reason, the pause says none.
    expect(await page.getByTestId('pause-reason').inputValue()).toBe('');
    await page.getByTestId('pause').click();
    await page.getByTestId('resume').waitFor();
    expect(sent).toEqual({});
    await page.getByTestId('resume').click();
    await page.getByTestId('pause').waitFor();
    await page.unrouteAll({ behavior: 'wait' });
  });

  it('tells: Tell waits for a text, sends it, shows the message id; a 403 is shown plainly', async () => {
    const tell = page.getByTestId('tell');
    expect(await tell.isDisabled()).toBe(true);
    await page.getByTestId('tell-text').fill('   ');
    expect(await tell.isDisabled()).toBe(true);
    let sent: unknown;
    await page.route(`**/v1/tasks/${running}/tell`, (route) => {
      sent = route.request().postDataJSON();
      return answer(route, 200, { taskId: running, messageId: 'm-42' });
    });
    await page.getByTestId('tell-text').fill('  use the v2 API, not v1 ');
    await tell.click();
    await expect
      .poll(() => page.getByTestId('told-receipt').textContent())
      .toContain('message m-42 is recorded');
    expect(sent).toEqual({ text: 'use the v2 API, not v1' });
    expect(await page.getByTestId('tell-text').inputValue()).toBe('');
    await page.unroute(`**/v1/tasks/${running}/tell`);
    await page.route(`**/v1/tasks/${running}/tell`, (route) =>
      refuse(route, 403, 'forbidden', 'token ops lacks the approve scope (it has read)'),
    );
    await page.getByTestId('tell-text').fill('again');
    await tell.click();
    await expect
      .poll(() => page.getByTestId('tell-refused').textContent())
      .toBe(
        'Tell refused (403): token ops lacks the approve scope (it has read) — this token’s scopes do not allow it',
      );
    await page.unrouteAll({ behavior: 'wait' });
  });

  it('shows a hold, the resume after it, a told message and the agent’s read of it in the timeline as they come', async () => {
    const factory = new EventFactory();
    const stepId = ofKind(h.eventsOf(running), 'step.started')[0]?.data.stepId ?? '';
    const publish = (event: ReturnType<EventFactory['make']>) =>
      h.client.publish(subjects.event('gated', running, event.kind), JSON.stringify(event));
    const scope = { pipeline: 'gated', taskId: running, traceparent: TRACEPARENT };
    publish(factory.make('task.paused', scope, { state: 'work', round: 1, by: 'ops', reason: 'wrong API' }));
    publish(
      factory.make('task.told', scope, { messageId: 'm-7', text: 'use the v2 API, not v1', by: 'ops' }),
    );
    const steer = page.getByTestId('timeline-steer');
    await expect
      .poll(() => steer.allTextContents(), { timeout: 15_000 })
      .toEqual(['paused by ops at work: wrong API', 'told m-7 by ops: use the v2 API, not v1']);
    publish(
      factory.make('task.resumed', scope, {
        state: 'work',
        round: 1,
        deliveries: 1,
        after: 'pause',
        by: 'ops',
        pausedMs: 4_200,
      }),
    );
    publish(factory.make('agent.told', scope, { agent: 'executor', stepId, turn: 2, messageIds: ['m-7'] }));
    await expect
      .poll(() => steer.allTextContents(), { timeout: 15_000 })
      .toContain('resumed by ops at work after 4.2 s paused');
    await expect
      .poll(() => page.getByTestId('timeline-told').allTextContents(), { timeout: 15_000 })
      .toEqual(['read m-7 “use the v2 API, not v1” before turn 2']);
    // The message as the page tells it (the receipt names the id its events name).
    await page.route(`**/v1/tasks/${running}/tell`, (route) =>
      answer(route, 200, { taskId: running, messageId: 'm-7' }),
    );
    await page.getByTestId('tell-text').fill('use the v2 API, not v1');
    await page.getByTestId('tell').click();
    await expect
      .poll(() => page.getByTestId('told-receipt').textContent())
      .toContain('message m-7 is recorded');
    expect(await page.getByTestId('tell-refused').count()).toBe(0);
    await page.unrouteAll({ behavior: 'wait' });
    await screenshotAtRest(page, shot('dashboard-steering'));
  });

  it('offers pause, resume and tell to a token with the approve scope, and none to one that may only submit', async () => {
    /** A page of its own (its own storage, so its own token). */
    const pageOf = async (token: string) => {
      const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
      const on = await context.newPage();
      await signIn(on, token);
      return { on, close: () => context.close() };
    };
    const approver = await pageOf(APPROVER);
    try {
      const { on } = approver;
      await open(on, 'gated', running);
      await on.getByTestId('steering').waitFor();
      expect(await on.getByTestId('pause').count()).toBe(1);
      expect(await on.getByTestId('tell').count()).toBe(1);
      // Cancel needs submit, which this token lacks.
      expect(await on.getByTestId('cancel').count()).toBe(0);
      // Fork needs submit too: an approver sees none on a finished task.
      await open(on, 'demo', completed);
      expect(await on.getByTestId('fork-open').count()).toBe(0);
      expect(await on.getByTestId('steering').count()).toBe(0);
    } finally {
      await approver.close();
    }
    const submitter = await pageOf(SUBMITTER);
    try {
      const { on } = submitter;
      await open(on, 'gated', running);
      await on.getByTestId('cancel').waitFor();
      expect(await on.getByTestId('steering').count()).toBe(0);
      expect(await on.getByTestId('pause').count()).toBe(0);
      await open(on, 'demo', completed);
      // One a step: demo's reviewer sent the work back once, and a fork names a step, not its round.
      expect(await on.getByTestId('fork-open').count()).toBe(3);
    } finally {
      await submitter.close();
    }
  });

  it('restarts a cancelled task from the step it stopped at, links the new task, which links back', async () => {
    await api(`/v1/tasks/${running}/cancel`, { reason: 'to restart it' });
    await expect
      .poll(
        () => page.locator(`[data-testid=task-row][data-task="${running}"]`).getAttribute('data-status'),
        { timeout: 15_000 },
      )
      .toBe('cancelled');
    await expect.poll(() => page.getByTestId('restart-step').inputValue()).toBe('work');
    expect(await page.getByTestId('steering').count()).toBe(0);
    // The new task the restart answers with: a real one, so it opens; its view names the original.
    const made = (await api<{ taskId: string }>('/v1/pipelines/gated/tasks', { goal: 'release v10, again' }))
      .taskId;
    const origin = { taskId: running, kind: 'restart', step: 'work' };
    let sent: unknown;
    await page.route(`**/v1/tasks/${running}/restart`, async (route) => {
      sent = route.request().postDataJSON();
      await answer(route, 202, { taskId: made, origin });
    });
    await page.route(`**/v1/tasks/${made}`, async (route) => {
      const view = await (await route.fetch()).json();
      await answer(route, 200, { ...view, origin });
    });
    await page.getByTestId('restart').click();
    await expect
      .poll(() => page.getByTestId('restarted').textContent())
      .toBe(`Started ${made}, a restart of this task from work.`);
    expect(sent).toEqual({ from: 'work' });
    await page.getByTestId('restarted').getByTestId('new-task').click();
    await expect
      .poll(() => page.getByTestId('origin').textContent())
      .toBe(`A restart of ${running} from step work`);
    await expect
      .poll(() =>
        page.locator(`[data-testid=task-row][data-task="${made}"] [data-testid=row-origin]`).textContent(),
      )
      .toBe(`restart of …${running.slice(-8)} @ work`);
    // The original lists what was made from it.
    await page.getByTestId('origin-link').click();
    await expect
      .poll(() => page.getByTestId('descendants').textContent())
      .toBe(`Made from it: ${made} (restart from work)`);
    // The page polls the new task: a plain unroute under a handler still answering one lets the browser go on with
    // that request, and the handler's answer then fails as already handled. Waiting lets it finish first.
    await page.unrouteAll({ behavior: 'wait' });
    await api(`/v1/tasks/${made}/cancel`, {});
  });

  it('refuses a restart plainly, and sends a restart whose answer was lost again under the same idempotency key', async () => {
    const keys: string[] = [];
    let lose = true;
    await page.route(`**/v1/tasks/${running}/restart`, (route) => {
      keys.push(route.request().headers()['idempotency-key'] ?? '');
      if (lose) return route.abort('connectionreset');
      return refuse(route, 409, 'conflict', `task ${running} has no step work to restart from`);
    });
    await page.getByTestId('restart').click();
    await expect
      .poll(() => page.getByTestId('restart-refused').textContent())
      .toMatch(/^Restart failed: the gateway did not answer \(/);
    lose = false;
    await page.getByTestId('restart').click();
    await expect
      .poll(() => page.getByTestId('restart-refused').textContent())
      .toBe(
        `Restart refused (409): task ${running} has no step work to restart from — the task’s state does not allow it now`,
      );
    // Refused, it made nothing: the next restart is a request of its own.
    await page.getByTestId('restart').click();
    await expect.poll(() => keys.length).toBe(3);
    expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(keys[2]).not.toBe(keys[0]);
    await page.unrouteAll({ behavior: 'wait' });
  });

  it('forks a finished task from a step: checks the input is JSON first, sends the edits, links the fork', async () => {
    await open(page, 'demo', completed);
    expect(await page.getByTestId('restart-form').count()).toBe(0);
    const forkOpen = page.locator('[data-testid=fork-open][data-step=review]');
    await forkOpen.click();
    const form = page.locator('[data-testid=fork-form][data-step=review]');
    // Only the steps before review may have their outputs replaced.
    expect(
      await form
        .getByTestId('fork-output')
        .evaluateAll((all) => all.map((el) => (el as HTMLElement).dataset.step)),
    ).toEqual(['plan', 'execute']);
    let calls = 0;
    let sent: unknown;
    await page.route(`**/v1/tasks/${completed}/fork`, async (route) => {
      calls += 1;
      sent = route.request().postDataJSON();
      await answer(route, 202, {
        taskId: 't-forked-0001',
        origin: { taskId: completed, kind: 'fork', step: 'review' },
      });
    });
    await form.getByTestId('fork-input').fill('{"audience": ');
    await form.getByTestId('fork').click();
    await expect
      .poll(() => form.getByTestId('fork-invalid').textContent())
      .toMatch(/^The input is not JSON: /);
    await form.getByTestId('fork-input').fill('["not", "an", "object"]');
    await form.getByTestId('fork').click();
    await expect
      .poll(() => form.getByTestId('fork-invalid').textContent())
      .toBe('The input must be a JSON object ({ … }), as a task’s input is');
    expect(calls).toBe(0);
    await form.getByTestId('fork-input').fill('{"audience": "ops"}');
    // Edited, the input is no longer said to be wrong.
    expect(await form.getByTestId('fork-invalid').count()).toBe(0);
    await form.locator('[data-testid=fork-output][data-step=execute]').fill('Wrote hello.md, in French');
    await screenshotAtRest(page, shot('dashboard-fork'));
    await form.getByTestId('fork').click();
    await expect
      .poll(() => form.getByTestId('forked').textContent())
      .toBe('Started t-forked-0001, a fork of this task at review.');
    expect(calls).toBe(1);
    expect(sent).toEqual({
      at: 'review',
      input: { audience: 'ops' },
      set: { execute: 'Wrote hello.md, in French' },
    });
    expect(await form.getByTestId('fork-invalid').count()).toBe(0);
    await page.unrouteAll({ behavior: 'wait' });
  });
});
