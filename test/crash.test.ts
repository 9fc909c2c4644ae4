import { readFileSync, statSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { eventsInMessage, facts, fixturePath, ofKind, waiter } from './support/harness.ts';
import { type NatsUsers, SERVERS, writeNatsUsers } from './support/natsUsers.ts';
import { seededRandom } from './support/seed.ts';

const { random } = seededRandom('kill -9 tests');
/** How long each of crashy's calls sleeps after its effect (its ledger line) before it returns. */
const CALL_SLEEP_MS = 1_000;
/** How long before a call's sleep ends the worker running it may still be killed: this process's own delay to the kill. */
const KILL_MARGIN_MS = 250;

/**
 * Real processes killed with SIGKILL: no shutdown code runs, nothing is handed back. Tasks must still end
 * once each, resumed by the next process, with every side effect (a line in ledger.txt per call) at most
 * once — exactly once for every call whose result was recorded.
 *
 * Each runs on an open server, and again on one whose users `troupe nats-config` wrote, every part on its own:
 * coordinators, a worker per pipeline, an approver (and the test's own client as a second coordinator).
 */
describe.each(SERVERS)('kill -9 on $server', ({ users: withUsers }) => {
  let nats: TestNats;
  let users: NatsUsers | undefined;
  /** Each part's environment: its user's, on a server with users. */
  const envs = new Map<string, NodeJS.ProcessEnv>();
  const envOf = (part: string) => envs.get(part) ?? cliEnv();
  let client: NatsConnection;
  let home: string;
  const events: TroupeEvent[] = [];
  const processes: CliProcess[] = [];
  /** Every process this test started, killed or not. */
  const started: CliProcess[] = [];
  const { notify, waitFor: until } = waiter();

  beforeAll(async () => {
    if (withUsers) {
      users = await writeNatsUsers([
        ...['crashy', 'crashgate', 'lingering'].map((name) => fixturePath(`${name}.yaml`)),
        '--coordinator',
        'coordinator',
        '--coordinator',
        'harness',
        '--worker',
        'clerk=crashy:clerk',
        '--worker',
        'releaser=crashgate:releaser',
        '--worker',
        'thinker=lingering:thinker',
        '--approver',
        'ana=crashgate',
      ]);
      nats = await startTestNats({ config: users.config });
      for (const part of ['coordinator', 'clerk', 'releaser', 'thinker', 'ana'])
        envs.set(part, await users.env(part, nats.url));
      client = await users.connect('harness', nats.url, 'crash-test');
    } else {
      nats = await startTestNats();
      client = await connect({ servers: nats.url, name: 'crash-test' });
    }
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        events.push(...eventsInMessage(msg));
        notify();
      },
    });
    await client.flush();
  });
  afterEach(async () => {
    // Nothing any part needed was refused it, killed ones included.
    for (const p of started.splice(0)) expect(p.output()).not.toMatch(/Permissions Violation/i);
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await rm(home, { recursive: true, force: true });
  });
  afterAll(async () => {
    await client?.close();
    await nats?.stop();
    await users?.remove();
  });

  const eventsOf = (taskId: string) => events.filter((e) => e.taskId === taskId);
  const finalsOf = (taskId: string) => eventsOf(taskId).filter((e) => FINAL_EVENT_KINDS.includes(e.kind));
  const ledgerOf = (id: string): string[] => {
    try {
      return readFileSync(join(home, 'workspaces', 'crashy', id, 'ledger.txt'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  };
  /**
   * Tasks with a tool call whose result has not come yet: killing now kills a process mid-call. With
   * `effected`, only those whose call already appended its line (killed after the effect, before the result).
   */
  const callsInFlight = (ids: readonly string[], effected = false) =>
    ids.filter((id) => {
      const mine = eventsOf(id);
      const calls = new Set(ofKind(mine, 'tool.call').map((c) => c.data.callId));
      const done = new Set(ofKind(mine, 'tool.result').map((r) => r.data.callId));
      const pending = [...calls].some((c) => !done.has(c));
      return pending && (!effected || ledgerOf(id).length >= calls.size);
    });

  /**
   * The last line a task's calls appended to its ledger: the turn of its call (0 for `first`) and when it was
   * written. The time is read before the lines, so it is never later than the last line's.
   */
  const lastEffect = (id: string): { turn: number; at: number } | undefined => {
    const file = join(home, 'workspaces', 'crashy', id, 'ledger.txt');
    let at: number;
    try {
      at = statSync(file).mtimeMs;
    } catch {
      return undefined;
    }
    const turn = ['first', 'second'].indexOf(ledgerOf(id).at(-1) ?? '');
    return turn < 0 ? undefined : { turn, at };
  };
  /** The JSON log lines a process wrote (with `--json`). */
  const logEntries = (p: CliProcess): Record<string, unknown>[] =>
    p
      .output()
      .split('\n')
      .flatMap((line) => {
        try {
          const entry: unknown = JSON.parse(line);
          return entry && typeof entry === 'object' ? [entry as Record<string, unknown>] : [];
        } catch {
          return [];
        }
      });
  /** The tasks whose step a worker started with `--log-level info --json` has received. */
  const stepsOn = (p: CliProcess): string[] =>
    logEntries(p).flatMap((entry) =>
      entry.dir === 'in' && entry.kind === 'agent.step' && typeof entry.taskId === 'string'
        ? [entry.taskId]
        : [],
    );

  /** Starts `troupe <args>` as `part` (a coordinator unless said). */
  const start = (args: string[], part = 'coordinator'): CliProcess => {
    const p = startTroupe([...args, '--server', nats.url, '--home', home], envOf(part));
    processes.push(p);
    started.push(p);
    return p;
  };
  const approve = (id: string) => troupe(['approve', id, '--server', nats.url], envOf('ana'));
  const up = (...extra: string[]) =>
    start([
      'up',
      fixturePath('crashy.yaml'),
      fixturePath('crashgate.yaml'),
      '--ack-wait',
      '2',
      '--step-heartbeat',
      '0.5',
      ...extra,
    ]);
  const kill = async (p: CliProcess) => {
    await p.stop('SIGKILL');
    processes.splice(processes.indexOf(p), 1);
  };
  const submit = async (pipeline: string, id: string) => {
    const js = jetstream(client);
    await js.publish(subjects.task(pipeline), JSON.stringify({ id, goal: 'record the entries' }), {
      msgID: id,
    });
  };

  /** Every task ended once, completed; each ledger line at most once, and once when its call's result is recorded. */
  function expectExactlyOnce(ids: readonly string[]): { inDoubt: number; effected: number } {
    let inDoubt = 0;
    let effected = 0;
    for (const id of ids) {
      const finals = finalsOf(id);
      expect(new Set(finals.map((f) => f.id)).size, `final events of ${id}`).toBe(1);
      expect(finals[0]?.kind, `${id}: ${JSON.stringify(finals[0]?.data)}`).toBe('task.completed');
      const lines = ledgerOf(id);
      const results = ofKind(eventsOf(id), 'tool.result');
      for (const [turn, line] of ['first', 'second'].entries()) {
        const count = lines.filter((l) => l === line).length;
        const doubted = results.some(
          (r) => r.data.error?.code === 'in_doubt' && r.data.callId.endsWith(`.${turn}.0`),
        );
        if (doubted) inDoubt++;
        if (doubted && count === 1) effected++;
        expect(count, `${id}: "${line}" lines in ${JSON.stringify(lines)}`).toBeLessThanOrEqual(1);
        if (!doubted) expect(count, `${id}: "${line}" lines in ${JSON.stringify(lines)}`).toBe(1);
      }
    }
    return { inDoubt, effected };
  }

  it('resumes every task after the coordinator is killed mid-tool-call and mid-approval, running each call once', async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-crash-'));
    const ids = Array.from({ length: 24 }, (_, i) => `crash-${i}`);
    const gated = ['gate-0', 'gate-1', 'gate-2'];
    let coordinator = up();
    await coordinator.waitFor(/troupe is up/);
    for (const id of ids) await submit('crashy', id);
    for (const id of gated) await submit('crashgate', id);

    // Kill 1: tool calls in flight, and every release waiting for its approval.
    const approvals = await until(() => {
      const asked = gated.map((id) => ofKind(eventsOf(id), 'approval.requested')[0]);
      return asked.every(Boolean) && callsInFlight(ids, true).length > 0 ? asked : undefined;
    }, 'approvals pending and tool calls in flight');
    await kill(coordinator);
    const firstKillInFlight = callsInFlight(ids).length;

    // While nothing runs, a person approves one release: the decision is recorded and applied on resume.
    const approvalIds = approvals.flatMap((a) => (a ? [a.data.approvalId] : []));
    const whileDown = await approve(approvalIds[0] ?? '');
    expect(whileDown.stdout).toMatch(/: allowed \(task gate-0.*takes it when its task resumes/);

    // Kill 2: after the tasks resumed, mid-tool-call again.
    coordinator = up();
    const resumedBefore = events.filter((e) => e.kind === 'task.resumed').length;
    await until(
      () =>
        events.filter((e) => e.kind === 'task.resumed').length > resumedBefore &&
        callsInFlight(ids, true).length > 0
          ? true
          : undefined,
      'resumed tasks with tool calls in flight',
    );
    await kill(coordinator);

    // A second release is approved while nothing runs; kill 3 comes at an arbitrary moment.
    await approve(approvalIds[1] ?? '');
    coordinator = up();
    await coordinator.waitFor(/troupe is up/);
    await new Promise((resolve) => setTimeout(resolve, 1_500 + random() * 1_500));
    await kill(coordinator);

    // The last coordinator runs everything to the end; the third release is approved while it runs.
    coordinator = up();
    await until(
      () => (eventsOf('gate-2').some((e) => e.kind === 'task.resumed') ? true : undefined),
      'gate-2 resumed',
    );
    const live = await approve(approvalIds[2] ?? '');
    // Either the resumed step was waiting already (a receipt), or not yet (recorded for it): both apply it.
    expect(live.stdout).toMatch(/: allowed \(task gate-2/);
    await until(
      () => ([...ids, ...gated].every((id) => finalsOf(id).length > 0) ? true : undefined),
      'every task to end',
      90_000,
    );

    const { inDoubt, effected } = expectExactlyOnce(ids);
    // Calls were cut short after their effect, and it still happened once.
    expect(effected).toBeGreaterThan(0);
    // The event log shows the resumptions.
    const resumed = [...ids, ...gated].filter((id) => eventsOf(id).some((e) => e.kind === 'task.resumed'));
    expect(resumed.length).toBeGreaterThanOrEqual(firstKillInFlight);
    // Recorded model replies were not asked again.
    expect(events.some((e) => e.kind === 'llm.response' && e.data.journaled === true)).toBe(true);
    for (const id of gated) {
      const decided = ofKind(eventsOf(id), 'approval.decided');
      expect(
        decided.map((d) => d.data.decision),
        id,
      ).toContain('allow');
      // Requested once: a restored step announces its pending request again, under the same id.
      expect(ofKind(facts(eventsOf(id)), 'approval.requested'), id).toHaveLength(1);
      const note = await readFile(join(home, 'workspaces', 'crashgate', id, 'release', 'NOTES.md'), 'utf8');
      expect(note).toBe('v1 is out\n');
    }
    console.info(
      `kill -9 coordinator: ${ids.length + gated.length} tasks, 3 kills, ${resumed.length} resumed, ${inDoubt} calls cut short (${effected} of them had taken effect, once; none ran again)`,
    );
  }, 240_000);

  it("hands a killed worker's steps to the worker still running, mid-step, without repeating a call", async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-crash-'));
    const ids = Array.from({ length: 12 }, (_, i) => `worker-${i}`);
    const coordinator = start(['up', fixturePath('crashy.yaml'), '--no-agents', '--step-heartbeat', '0.5']);
    await coordinator.waitFor(/troupe is up/);
    // Both workers log each step they receive, so the test knows which steps die with the doomed one and which the
    // survivor took.
    const worker = () =>
      start(['worker', fixturePath('crashy.yaml'), '--log-level', 'info', '--json'], 'clerk');
    const doomed = worker();
    const survivor = worker();
    await Promise.all([doomed.waitFor(/serving/), survivor.waitFor(/serving/)]);
    for (const id of ids) await submit('crashy', id);

    // Killed in the same synchronous turn as the check that one of its calls has had its effect and is still in the
    // `sleep 1` after it: the call cannot have returned, so its result was never recorded. (Events are no guide here:
    // on a busy machine a call's tool.result event can lag behind its recorded result.)
    const cut = await vi.waitFor(
      () => {
        const elsewhere = new Set(stepsOn(survivor));
        const call = stepsOn(doomed)
          .filter((id) => !elsewhere.has(id))
          .flatMap((id) => {
            const effect = lastEffect(id);
            return effect && Date.now() - effect.at < CALL_SLEEP_MS - KILL_MARGIN_MS
              ? [{ id, ...effect }]
              : [];
          })[0];
        if (!call) throw new Error('no call on the doomed worker between its effect and its result');
        doomed.child.kill('SIGKILL');
        return { ...call, killedAt: Date.now() };
      },
      { timeout: 60_000, interval: 20 },
    );
    const linesAtKill = new Map(ids.map((id) => [id, ledgerOf(id).length]));
    await kill(doomed);
    // The kill came before the call's sleep ended (it always does unless this process stalled between two statements).
    const beforeResult = cut.killedAt < cut.at + CALL_SLEEP_MS;
    await until(
      () => (ids.every((id) => finalsOf(id).length > 0) ? true : undefined),
      'every task to end',
      90_000,
    );
    const { inDoubt, effected } = expectExactlyOnce(ids);

    // Every step the dead worker held was taken over and finished: the workflow noticed the silence and sent it to
    // the survivor (nothing waited for a step timeout). It held at least each step with a call yet to make.
    const silent = new Set(
      logEntries(coordinator).flatMap((entry) =>
        typeof entry.stepId === 'string' &&
        /went silent; sending the step to another worker/.test(`${entry.msg}`)
          ? [entry.stepId.slice(0, entry.stepId.indexOf('.'))]
          : [],
      ),
    );
    const held = stepsOn(doomed).filter(
      (id) => (linesAtKill.get(id) ?? 0) < 2 || (id === cut.id && beforeResult),
    );
    expect(held).toContain(cut.id);
    const takenOver = new Set(stepsOn(survivor));
    for (const id of held) {
      expect(silent.has(id), `${id}: the coordinator's step sent on`).toBe(true);
      expect(takenOver.has(id), `${id}: received by the survivor`).toBe(true);
    }

    // The cut-short call was taken over without running again: in doubt, as the kill came before its result. Only
    // if this process stalled past its sleep may the result have been recorded, to be replayed from the journal.
    const outcomes = ofKind(eventsOf(cut.id), 'tool.result')
      .filter((r) => r.data.callId.endsWith(`.${cut.turn}.0`))
      .map((r) => r.data);
    const killedAfter = Math.round(cut.killedAt - cut.at);
    const detail = `${cut.id} turn ${cut.turn}, killed ${killedAfter} ms after its effect: ${JSON.stringify(outcomes)}`;
    if (beforeResult) {
      expect(
        outcomes.some((r) => r.error?.code === 'in_doubt'),
        detail,
      ).toBe(true);
    } else if (takenOver.has(cut.id)) {
      expect(
        outcomes.some((r) => r.error?.code === 'in_doubt' || r.journaled === true),
        detail,
      ).toBe(true);
    }
    // A taken-over step replays the model replies recorded before the kill (the cut step's, at least).
    const replayed = events.filter(
      (e) => ids.includes(e.taskId) && e.kind === 'llm.response' && e.data.journaled === true,
    ).length;
    expect(replayed).toBeGreaterThan(0);
    console.info(
      `kill -9 worker: ${ids.length} tasks, ${held.length} held by the killed worker (killed ${killedAfter} ms after a call's effect), ${replayed} model replies replayed from the journal, ${inDoubt} calls cut short (${effected} had taken effect, once)`,
    );
  }, 180_000);

  it('dead-letters a task whose coordinators keep dying under it, with the reason', async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-crash-'));
    const upSlowpoke = () =>
      start(['up', fixturePath('slowpoke.yaml'), '--ack-wait', '2', '--max-deliver', '2']);
    // Deliveries 1 and 2 each die mid-step.
    for (let delivery = 1; delivery <= 2; delivery++) {
      const coordinator = upSlowpoke();
      await coordinator.waitFor(/troupe is up/);
      if (delivery === 1) await submit('slowpoke', 'poison-1');
      await until(
        () => (ofKind(eventsOf('poison-1'), 'llm.request').length >= delivery ? true : undefined),
        `delivery ${delivery} to reach the model`,
      );
      await kill(coordinator);
    }
    upSlowpoke();
    const final = await until(() => finalsOf('poison-1')[0], 'the task to be given up on');
    expect(final.kind === 'task.failed' && final.data.reason).toBe('max_deliveries');
    expect(ofKind(eventsOf('poison-1'), 'task.resumed')).toHaveLength(1);

    const jsm = await jetstreamManager(client);
    const letter = await jsm.streams.getMessage(STREAMS.deadLetters, {
      last_by_subj: subjects.deadLetter('slowpoke'),
    });
    expect(letter?.header?.get('Troupe-Task-Id')).toBe('poison-1');
    expect(letter?.header?.get('Troupe-Reason')).toContain('delivered 2 times without finishing');
    expect(JSON.parse(new TextDecoder().decode(letter?.data))).toMatchObject({ id: 'poison-1' });
  }, 120_000);

  it('does not dead-letter a task that made progress on every delivery, however often its coordinator died', async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-crash-'));
    // The bucket exists once the first coordinator is up.
    const progressOf = async () => {
      const workflows = await new Kvm(client).open(BUCKETS.workflows).catch(() => undefined);
      const entry = await workflows?.get('stepper-1').catch(() => null);
      return entry?.json<{ progress?: number }>().progress ?? 0;
    };
    const upStepwise = () =>
      start(['up', fixturePath('stepwise.yaml'), '--ack-wait', '2', '--max-deliver', '2']);
    // Three deliveries in a row die, each after completing a step (its checkpoint written): more deliveries than
    // --max-deliver allows, but none of them without progress.
    for (let delivery = 1; delivery <= 3; delivery++) {
      const before = await progressOf();
      const coordinator = upStepwise();
      await coordinator.waitFor(/troupe is up/);
      if (delivery === 1) await submit('stepwise', 'stepper-1');
      await expect
        .poll(progressOf, { timeout: 30_000, message: `delivery ${delivery} to progress` })
        .toBeGreaterThan(before);
      await kill(coordinator);
    }
    upStepwise();
    const final = await until(() => finalsOf('stepper-1')[0], 'the task to end');
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    expect(ofKind(eventsOf('stepper-1'), 'task.resumed').length).toBeGreaterThanOrEqual(3);
  }, 120_000);

  it("stops a worker's step once the coordinator waiting for it is gone, and runs it again for the next", async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-crash-'));
    const files = [fixturePath('lingering.yaml'), fixturePath('crashgate.yaml')];
    const workflows = () =>
      start(['up', ...files, '--no-agents', '--ack-wait', '2', '--step-heartbeat', '0.5']);
    let coordinator = workflows();
    await coordinator.waitFor(/troupe is up/);
    // A worker per pipeline, each its own user on a server with users.
    const thinker = start(['worker', fixturePath('lingering.yaml')], 'thinker');
    const releaser = start(['worker', fixturePath('crashgate.yaml')], 'releaser');
    await Promise.all([thinker.waitFor(/serving/), releaser.waitFor(/serving/)]);
    await submit('lingering', 'orphan-1');
    await submit('crashgate', 'orphan-gate');
    const asked = await until(() => ofKind(eventsOf('orphan-gate'), 'approval.requested')[0], 'the approval');
    await until(
      () => (ofKind(eventsOf('orphan-1'), 'llm.request').length > 0 ? true : undefined),
      'the model call',
    );
    await kill(coordinator);
    // Nobody listens for the steps' replies now: the worker stops them instead of finishing them for nobody.
    await thinker.waitFor(/nobody waits for step orphan-1\.think\.1 any more/, 20_000);
    await releaser.waitFor(/nobody waits for step orphan-gate\.release\.1 any more/, 20_000);
    // The stopped step's approval stays pending for the run that gets the step next.
    const approvals = await new Kvm(client).open(BUCKETS.approvals);
    expect(
      (await approvals.get(`crashgate.${asked.data.approvalId}`))?.json<{ status: string }>().status,
    ).toBe('pending');

    coordinator = workflows();
    await until(
      () => (eventsOf('orphan-gate').some((e) => e.kind === 'task.resumed') ? true : undefined),
      'resumed',
    );
    await approve(asked.data.approvalId);
    for (const id of ['orphan-1', 'orphan-gate']) {
      const final = await until(() => finalsOf(id)[0], `${id} to end`);
      expect(final.kind).toBe('task.completed');
    }
    // The stopped run's model call never answered; the next run asked again and got the only reply.
    expect(ofKind(eventsOf('orphan-1'), 'llm.request')).toHaveLength(2);
    expect(ofKind(eventsOf('orphan-1'), 'llm.response').map((r) => r.data.journaled ?? false)).toEqual([
      false,
    ]);
    // The approval was asked once and decided once, for the run that went on.
    expect(ofKind(facts(eventsOf('orphan-gate')), 'approval.requested')).toHaveLength(1);
    expect(ofKind(eventsOf('orphan-gate'), 'approval.decided').map((d) => d.data.decision)).toEqual([
      'allow',
    ]);
  }, 90_000);
});
