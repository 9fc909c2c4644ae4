import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type NatsConnection, PermissionViolationError } from '@nats-io/transport-node';
import { type Dataset, TroupeEvent, type ValueRef } from '@troupe/protocol';
import { ValueStore } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type CliProcess, startTroupe, troupe } from './support/cli.ts';
import { examplePath, fixturePath } from './support/harness.ts';
import { type NatsUsers, writeNatsUsers } from './support/natsUsers.ts';
import { seededRandom } from './support/seed.ts';
import { messageStorm } from './support/storm.ts';

/**
 * A nats-server whose users are the ones `troupe nats-config` wrote for the demo pipeline and `gated` (whose releases
 * need a person's approval): a coordinator, a worker per agent, a submitter, an observer and two approvers, each with
 * its own nkey and inbox. Both run with every part on its own credentials, and what the issue found forgeable from
 * outside is refused by the broker.
 */
describe('NATS users with least privilege, from troupe nats-config', () => {
  let nats: TestNats;
  let users: NatsUsers;
  let dir: string;
  const processes: CliProcess[] = [];
  const clients: NatsConnection[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-roles-'));
    users = await writeNatsUsers([
      examplePath('demo.yaml'),
      fixturePath('gated.yaml'),
      '--worker',
      'planner=demo:planner',
      '--worker',
      'executor=demo:executor',
      '--worker',
      'reviewer=demo:reviewer',
      '--worker',
      'releaser=gated:executor',
      '--submitter',
      'ci=demo,gated',
      '--submitter',
      'cd=gated',
      '--observer',
      'watcher=demo',
      '--approver',
      'ana=demo,gated',
      '--approver',
      'bo=demo',
      '--gateway',
      'front',
    ]);
    expect(users.summary).toContain('with 11 users');
    // The server's configuration is the block as written (an operator would include it in theirs).
    nats = await startTestNats({ config: users.config });
    // The demo's parts, each on its own user: a coordinator running workflows only, a worker per agent.
    const home = join(dir, 'home');
    const up = startTroupe(
      ['up', examplePath('demo.yaml'), fixturePath('gated.yaml'), '--no-agents', '--home', home],
      await envOf('coordinator'),
    );
    processes.push(up);
    await up.waitFor(/troupe is up/, 30_000);
    const workers = [
      ['planner', examplePath('demo.yaml'), 'planner'],
      ['executor', examplePath('demo.yaml'), 'executor'],
      ['reviewer', examplePath('demo.yaml'), 'reviewer'],
      ['releaser', fixturePath('gated.yaml'), 'executor'],
    ];
    for (const [user, file, agent] of workers) {
      const worker = startTroupe(
        ['worker', file as string, '--agents', agent as string, '--home', home],
        await envOf(user as string),
      );
      processes.push(worker);
      await worker.waitFor(/serving|ready|worker is up/i, 30_000);
    }
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    for (const c of clients.splice(0)) await c.close();
    await nats?.stop();
    await users?.remove();
    await rm(dir, { recursive: true, force: true });
  });

  /** The environment a role's process runs with: the server, its seed and its inbox, from its .env file. */
  const envOf = (role: string) => users.env(role, nats.url);

  /** A raw connection as a role's user, watching for permission violations the server reports. */
  const as = async (role: string) => {
    const nc = await users.connect(role, nats.url, `forger-${role}`);
    clients.push(nc);
    const violations: PermissionViolationError[] = [];
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'error' && status.error instanceof PermissionViolationError)
          violations.push(status.error);
      }
    })();
    return { nc, violations };
  };

  it('runs the demo with every part on its own credentials', async () => {
    const submitted = await troupe(
      ['submit', 'demo', 'Write a short hello note in notes/hello.md', '--wait'],
      await envOf('ci'),
      90_000,
    );
    expect(submitted.code, `${submitted.stdout}\n${submitted.stderr}`).toBe(0);
    expect(submitted.stdout).toContain('task.completed');
    // Nobody was refused anything it needed.
    for (const p of processes) expect(p.output()).not.toMatch(/Permissions Violation/i);
  }, 120_000);

  it('refuses a forged reviewer: no user but the reviewer worker may take the reviewer’s steps', async () => {
    for (const role of ['executor', 'ci', 'watcher', 'ana', 'front']) {
      const { nc } = await as(role);
      const queued = nc.subscribe('troupe.agents.demo.reviewer', { queue: 'troupe-demo-reviewer' });
      const plain = nc.subscribe('troupe.agents.demo.reviewer');
      expect(await queued.closed, role).toBeInstanceOf(PermissionViolationError);
      expect(await plain.closed, role).toBeInstanceOf(PermissionViolationError);
    }
    // The reviewer itself may, in its queue group only.
    const { nc } = await as('reviewer');
    const own = nc.subscribe('troupe.agents.demo.reviewer', { queue: 'troupe-demo-reviewer' });
    const outside = nc.subscribe('troupe.agents.demo.reviewer');
    expect(await outside.closed).toBeInstanceOf(PermissionViolationError);
    await nc.flush();
    expect(own.isClosed()).toBe(false);
    // It answers nothing: left in the queue group, it would take half the reviewer's steps from here on.
    own.unsubscribe();
    await nc.flush();
  });

  it('refuses a forged step request, a forged task ending, a forged decision and reading another’s replies', async () => {
    const forgeries: [string, string][] = [
      ['ci', 'troupe.agents.demo.executor'],
      ['watcher', 'troupe.agents.demo.executor'],
      ['executor', 'troupe.agents.demo.reviewer'],
      ['ci', 'troupe.events.demo.t-1.task.completed'],
      ['executor', 'troupe.events.demo.t-1.task.completed'],
      ['reviewer', 'troupe.events.demo.t-1.task.failed'],
      // The gateway submits and decides, but neither ends a task nor writes what steps keep.
      ['front', 'troupe.events.demo.t-1.task.completed'],
      ['front', 'troupe.agents.demo.executor'],
      ['front', '$KV.workflows.t-1'],
      ['front', '$KV.journal.demo.t-1.work.1.1.0'],
      ['ci', 'troupe.approvals.demo.t-1.ap-1'],
      ['executor', 'troupe.approvals.demo.t-1.ap-1'],
      ['ci', '$KV.approvals.demo.ap-1'],
      // Another pipeline's decisions: neither its workers nor an approver of other pipelines may make them.
      ['planner', 'troupe.approvals.gated.t-1.ap-1'],
      ['planner', '$KV.approvals.gated.ap-1'],
      ['bo', 'troupe.approvals.gated.t-1.ap-1'],
      ['bo', '$KV.approvals.gated.ap-1'],
      // Another pipeline's step journal and task memory, another agent's long-term memory.
      ['planner', '$KV.journal.gated.t-1.work.1.1.0'],
      ['planner', '$JS.API.DIRECT.GET.KV_journal.$KV.journal.gated.t-1.work.1.1.0'],
      ['planner', '$KV.memory.task.gated.t-1.notes'],
      ['planner', '$KV.memory.agent.demo.executor.notes'],
      ['planner', '$JS.API.DIRECT.GET.KV_memory.$KV.memory.agent.demo.executor.notes'],
      // Pipeline versions are written by coordinators only; a worker reads only its own pipeline's.
      ['planner', '$KV.versions.demo.x'],
      ['planner', '$JS.API.DIRECT.GET.KV_versions.$KV.versions.gated.x'],
      ['front', '$KV.versions.demo.x'],
      ['ci', '$KV.versions.demo.x'],
      // No consumer on a bucket, even its own part: nats-server would deliver what it wrote to any subject it names.
      ['planner', '$JS.API.CONSUMER.CREATE.KV_journal.x.$KV.journal.demo.>'],
      ['ana', '$JS.API.CONSUMER.CREATE.KV_approvals.x.$KV.approvals.demo.>'],
      ['front', '$JS.API.CONSUMER.CREATE.KV_sessions.x.$KV.sessions.>'],
      ['ci', '$JS.API.CONSUMER.CREATE.KV_workflows.x.$KV.workflows.>'],
      ['ci', 'troupe.tasks.other'],
      ['ana', 'troupe.tasks.demo'],
    ];
    for (const [role, subject] of forgeries) {
      const { nc, violations } = await as(role);
      nc.publish(subject, '{}');
      await expect.poll(() => violations.map((v) => v.subject), { timeout: 5_000 }).toContain(subject);
      expect(violations.find((v) => v.subject === subject)?.operation, `${role} → ${subject}`).toBe(
        'publish',
      );
    }
    // Replies to others are theirs alone.
    const { nc } = await as('ci');
    const snooping = nc.subscribe('troupe._inbox.coordinator.>');
    expect(await snooping.closed).toBeInstanceOf(PermissionViolationError);
  });

  it('lets a worker read its own pipeline’s stored versions, to run a step of a task on an older one', async () => {
    const { nc, violations } = await as('planner');
    const key = '$JS.API.DIRECT.GET.KV_versions.$KV.versions.demo.x';
    // Answered by the server (the key is absent), not refused.
    await nc.request(key, '', { timeout: 5_000 }).catch(() => undefined);
    await nc.flush();
    expect(violations.map((v) => v.subject)).not.toContain(key);
  });

  it('lets a worker read its own pipeline’s registration, to serve the agents a reload adds, and no other’s', async () => {
    const { nc, violations } = await as('planner');
    const own = '$JS.API.DIRECT.GET.KV_pipelines.$KV.pipelines.demo';
    const other = '$JS.API.DIRECT.GET.KV_pipelines.$KV.pipelines.gated';
    // Its own is answered by the server (the registration the coordinator wrote), not refused.
    const answer = await nc.request(own, '', { timeout: 5_000 });
    expect(answer.headers?.get('Nats-Subject')).toBe('$KV.pipelines.demo');
    nc.publish(other, '');
    await expect.poll(() => violations.map((v) => v.subject), { timeout: 5_000 }).toContain(other);
    expect(violations.map((v) => v.subject)).not.toContain(own);
  });

  it('keeps each pipeline’s large values its own: its workers write and read them, observers and the gateway read', async () => {
    const whole = 'v'.repeat(300 * 1024);
    const { nc: planner } = await as('planner');
    const { ref } = await new ValueStore({ connection: planner }).offload(
      'demo',
      'roles-1.plan.1.output',
      whole,
    );
    const stored = ref as ValueRef;
    expect(stored.bucket).toBe('troupe-values-demo');
    for (const role of ['planner', 'executor', 'watcher', 'front']) {
      const { nc } = await as(role);
      expect(await new ValueStore({ connection: nc }).read(stored), role).toBe(whole);
    }
    // Another pipeline's worker, a submitter and an approver may not read them.
    for (const role of ['releaser', 'ci', 'ana']) {
      const { nc, violations } = await as(role);
      await expect(new ValueStore({ connection: nc }).read(stored), role).rejects.toMatchObject({
        code: 'value_unavailable',
      });
      await nc.flush();
      expect(
        violations.map((v) => v.subject),
        role,
      ).toContain('$JS.API.STREAM.MSG.GET.OBJ_troupe-values-demo');
    }
    // Only the pipeline's workers (and coordinators) write them.
    for (const role of ['releaser', 'watcher', 'front']) {
      const { nc } = await as(role);
      const writing = new ValueStore({ connection: nc }).offload('demo', `forged-by-${role}`, `${whole}!`);
      await expect(writing, role).rejects.toMatchObject({ name: 'ValueStoreError' });
    }
    expect(await new ValueStore({ connection: planner }).read(stored)).toBe(whole);
  });

  it('lets a submitter store a task input too large for its message, which the pipeline’s workers read, and no more', async () => {
    const input = JSON.stringify({ doc: 'd'.repeat(400 * 1024) });
    const { nc: ci } = await as('ci');
    const ref = await new ValueStore({ connection: ci }).storeInput('demo', 'roles-in-1', input);
    expect(ref.bucket).toBe('troupe-inputs-demo');
    for (const role of ['planner', 'watcher', 'front', 'ci']) {
      const { nc } = await as(role);
      expect(await new ValueStore({ connection: nc }).read(ref), role).toBe(input);
    }
    // Stored inputs are the submitter's only objects: it writes no step's value, and another pipeline's worker reads
    // no input of this one.
    await expect(
      new ValueStore({ connection: ci }).offload('demo', 'forged-by-ci', 'x'.repeat(300 * 1024)),
    ).rejects.toMatchObject({ name: 'ValueStoreError' });
    const { nc: releaser, violations } = await as('releaser');
    await expect(new ValueStore({ connection: releaser }).read(ref)).rejects.toMatchObject({
      code: 'value_unavailable',
    });
    await releaser.flush();
    expect(violations.map((v) => v.subject)).toContain('$JS.API.STREAM.MSG.GET.OBJ_troupe-inputs-demo');
    // An observer may not store one.
    const { nc: watcher } = await as('watcher');
    await expect(
      new ValueStore({ connection: watcher }).storeInput('demo', 'roles-in-2', input),
    ).rejects.toMatchObject({
      name: 'ValueStoreError',
    });
  });

  it('does not take an event for what its body says when it came on another subject', async () => {
    const { nc, violations } = await as('executor');
    const taskId = 'forged-end-1';
    // The worker may publish its pipeline's events, but not a task's ending: it sends one on a subject it may use.
    const accepted = new Promise<void>((resolve) => {
      const sub = nc.subscribe(`troupe.events.demo.${taskId}.task.accepted`, { max: 1 });
      void (async () => {
        for await (const _ of sub) resolve();
      })();
    });
    await nc.flush();
    const waiting = troupe(
      ['submit', 'demo', 'Write a short hello note in notes/hello.md', '--wait', '--id', taskId],
      await envOf('ci'),
      90_000,
    );
    await accepted;
    const forged = {
      id: `${taskId}:task.completed`,
      ts: new Date().toISOString(),
      pipeline: 'demo',
      taskId,
      kind: 'task.completed',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      from: 'workflow',
      to: 'user',
      data: {
        output: 'FORGED RESULT',
        approved: true,
        rounds: 1,
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        usageByAgent: {},
        durationMs: 1,
      },
    };
    // A valid event, but for its subject: the forgery is in the mismatch alone.
    expect(TroupeEvent.safeParse(forged).success).toBe(true);
    nc.publish(`troupe.events.demo.${taskId}.step.note`, JSON.stringify(forged));
    await nc.flush();
    const result = await waiting;
    expect(violations).toEqual([]);
    expect(result.code, result.stderr).toBe(0);
    // It waited for the task's own ending.
    expect(result.stdout).not.toContain('FORGED RESULT');
    expect(result.stdout).toContain('task.completed');
  }, 120_000);

  it('keeps a pipeline’s approvals to its own workers and approvers, and lets its approver decide them', async () => {
    const taskId = 'roles-gate-1';
    const waiting = troupe(
      ['submit', 'gated', 'release v1', '--wait', '--id', taskId],
      await envOf('ci'),
      90_000,
    );
    // The approver of both pipelines sees the request (its .env names its pipelines; it may read no others).
    const listed = async (role: string) =>
      (await troupe(['approvals', '--json'], await envOf(role))).stdout
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as { id: string; taskId: string });
    const { id } = await vi.waitFor(
      async () => {
        const request = (await listed('ana')).find((r) => r.taskId === taskId);
        if (!request) throw new Error(`no approval listed for ${taskId} yet`);
        return request;
      },
      { timeout: 60_000, interval: 250 },
    );
    // Another pipeline's worker can neither hear the request's decision nor read or watch its record.
    const { nc, violations } = await as('planner');
    for (const subject of [`troupe.approvals.gated.${taskId}.${id}`, 'troupe.approvals.gated.>']) {
      expect(await nc.subscribe(subject).closed, subject).toBeInstanceOf(PermissionViolationError);
    }
    const reads = [
      `$JS.API.DIRECT.GET.KV_approvals.$KV.approvals.gated.${id}`,
      '$JS.API.STREAM.MSG.GET.KV_approvals',
      '$JS.API.CONSUMER.CREATE.KV_approvals.snoop.$KV.approvals.gated.>',
      '$JS.API.CONSUMER.CREATE.KV_approvals.snoop.$KV.approvals.>',
    ];
    for (const subject of reads)
      nc.publish(subject, JSON.stringify({ last_by_subj: `$KV.approvals.gated.${id}` }));
    const published = () => violations.filter((v) => v.operation === 'publish').map((v) => v.subject);
    await expect.poll(() => published().sort(), { timeout: 5_000 }).toEqual(reads.sort());
    // An approver of the demo only does not see it, and cannot decide it.
    expect((await listed('bo')).map((r) => r.id)).not.toContain(id);
    const refused = await troupe(['approve', id], await envOf('bo'));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`no approval named ${id}`);
    // Its own approver decides it; the waiting worker gets the decision and the task completes.
    const approved = await troupe(['approve', id, '--by', 'ana'], await envOf('ana'));
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toContain(`${id}: allowed`);
    const result = await waiting;
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.stdout).toContain('task.completed');
    for (const p of processes) expect(p.output()).not.toMatch(/Permissions Violation/i);
  }, 120_000);

  it('lets an approver pause, tell and resume its pipelines’ tasks, and no other’s, but not cancel one', async () => {
    const taskId = 'roles-steer-1';
    const waiting = troupe(
      ['submit', 'gated', 'release v2', '--wait', '--id', taskId],
      await envOf('ci'),
      90_000,
    );
    const { id } = await vi.waitFor(
      async () => {
        const listed = (await troupe(['approvals', '--json'], await envOf('ana'))).stdout
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line) as { id: string; taskId: string });
        const request = listed.find((r) => r.taskId === taskId);
        if (!request) throw new Error(`no approval listed for ${taskId} yet`);
        return request;
      },
      { timeout: 60_000, interval: 250 },
    );
    const ana = await envOf('ana');
    const told = await troupe(['tell', taskId, 'release to staging first', '--by', 'ana'], ana);
    expect(told.code, told.stderr).toBe(0);
    const paused = await troupe(['pause', taskId, '--reason', 'hold the release'], ana);
    expect(paused.code, paused.stderr).toBe(0);
    expect((await troupe(['status', taskId], ana)).stdout).toMatch(
      new RegExp(`^${taskId} {2}gated@\\w+ {2}paused`),
    );
    // An approver of the demo only may not steer the gated pipeline's tasks: the server refuses the publish.
    const bo = await troupe(['resume', taskId], await envOf('bo'));
    expect(bo.code).toBe(1);
    expect(bo.stderr).toContain(
      `troupe: this NATS user may not publish on troupe.steer.gated.${taskId} (task ${taskId} of pipeline gated): `,
    );
    // Nor may an approver cancel (the control subject names no pipeline, and takes every action).
    const cancel = await troupe(['cancel', taskId], ana);
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toContain(`troupe: this NATS user may not publish on troupe.control.${taskId} `);
    expect(cancel.stderr).toContain('docs/permissions.md says which role may');
    const resumed = await troupe(['resume', taskId], ana);
    expect(resumed.code, resumed.stderr).toBe(0);
    const approved = await troupe(['approve', id, '--by', 'ana'], ana);
    expect(approved.code, approved.stderr).toBe(0);
    const result = await waiting;
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.stdout).toMatch(/task\.told[\s\S]*task\.paused[\s\S]*task\.resumed[\s\S]*task\.completed/);
  }, 120_000);

  it('keeps serving through a storm of messages from a submitter, refusing visibly all it may not send', async () => {
    const { seed, random } = seededRandom('message storm as a submitter');
    const { pick, payloads, subjectsHeard } = messageStorm(random);
    const { nc, violations } = await as('ci');
    const sentTo = new Set<string>();
    const started = Date.now();
    for (let sent = 1; sent <= 1_000 && Date.now() - started < 10_000; sent++) {
      const subject = pick(subjectsHeard)();
      // What it may send, tasks of its pipeline, the robustness suite storms already: here, what it may not.
      if (subject === 'troupe.tasks.demo') continue;
      sentTo.add(subject);
      nc.publish(subject, pick(payloads)());
      if (sent % 100 === 0) await nc.flush();
    }
    await nc.flush();
    // Every subject was refused, and the refusal said so to the client.
    const refusable = [...sentTo].sort();
    await expect
      .poll(() => [...new Set(violations.map((v) => v.subject))].sort(), { timeout: 10_000 })
      .toEqual(refusable);
    expect(refusable.length, `seed ${seed}`).toBeGreaterThan(3);
    // The deployment still serves it: a valid task it submits after the storm completes.
    const after = await troupe(['submit', 'demo', 'write a hello note', '--wait'], await envOf('ci'), 90_000);
    expect(after.code, `seed ${seed}: ${after.stdout}\n${after.stderr}`).toBe(0);
    console.info(
      `message storm as a submitter: ${sentTo.size} subjects, ${violations.length} refusals (seed ${seed})`,
    );
  }, 120_000);

  it('lets an observer follow its pipeline’s tasks: status, logs and trace', async () => {
    const taskId = 'roles-observed-1';
    const submitted = await troupe(
      ['submit', 'demo', 'Write a short hello note in notes/hello.md', '--wait', '--id', taskId],
      await envOf('ci'),
      90_000,
    );
    expect(submitted.code, submitted.stderr).toBe(0);
    const env = await envOf('watcher');
    const commands: [string[], string][] = [
      [['status', taskId], 'completed'],
      [['status', '--all'], taskId],
      [['logs', taskId], 'task.completed'],
      [['trace', taskId], 'review'],
    ];
    // Each on its own: run side by side, as each CLI process takes a second to start.
    const results = await Promise.all(
      commands.map(async ([args, shown]) => ({ args, shown, result: await troupe(args, env) })),
    );
    for (const { args, shown, result } of results) {
      expect(result.code, `troupe ${args.join(' ')}: ${result.stderr}`).toBe(0);
      expect(result.stdout, `troupe ${args.join(' ')}`).toContain(shown);
      expect(result.stderr, `troupe ${args.join(' ')}`).not.toMatch(/violation|warning/i);
    }
  }, 120_000);

  it('lets a submitter fork its pipeline’s task from the command line, and nobody else, nor another pipeline’s', async () => {
    const taskId = 'roles-family-1';
    const ci = await envOf('ci');
    const original = await troupe(
      ['submit', 'demo', 'Write a short hello note in notes/hello.md', '--wait', '--id', taskId],
      ci,
      90_000,
    );
    expect(original.code, original.stderr).toBe(0);
    // The demo's task events, as its submitter hears them live.
    const { nc } = await as('ci');
    const heard: TroupeEvent[] = [];
    const sub = nc.subscribe('troupe.events.demo.*.task.>');
    void (async () => {
      for await (const msg of sub) heard.push(msg.json<TroupeEvent>());
    })();
    await nc.flush();
    // A submitter of the demo reads the original's stored events (what it reuses) and submits the new task.
    const forked = await troupe(['fork', taskId, '--at', 'review', '--by', 'ci'], ci);
    expect(forked.code, forked.stderr).toBe(0);
    expect(forked.stderr).not.toMatch(/violation/i);
    const newId = /^(\S+): fork of/.exec(forked.stdout)?.[1] ?? '';
    const ending = () =>
      heard.find((e) => e.taskId === newId && /^task\.(completed|failed|cancelled)$/.test(e.kind))?.kind;
    await expect.poll(ending, { timeout: 60_000 }).toBe('task.completed');
    expect(heard.find((e) => e.taskId === newId && e.kind === 'task.accepted')?.data).toMatchObject({
      origin: { taskId, kind: 'fork', step: 'review' },
    });
    // A submitter of another pipeline, an approver and an observer of the demo may not: each is refused by the
    // server, the first two reading the original's stored events, the observer submitting the new task.
    const refusals = await Promise.all(
      ['cd', 'ana', 'watcher'].map(async (role) => ({
        role,
        result: await troupe(['fork', taskId, '--at', 'review'], await envOf(role)),
      })),
    );
    for (const { role, result } of refusals) {
      expect(result.code, `${role}: ${result.stdout}`).toBe(1);
      expect(result.stdout, role).toBe('');
    }
    const [cd, ana, watcher] = refusals.map(({ result }) => result.stderr);
    const refused = (what: string) =>
      `troupe: this NATS user may not ${what}, so it may not fork task ${taskId} (`;
    expect(cd).toContain(refused('read the stored events of pipeline demo'));
    // Its consumer of EVENTS may read the gated pipeline's events only.
    expect(cd).toContain(`"$JS.API.CONSUMER.CREATE.EVENTS.`);
    expect(ana).toContain(refused('read the stored events of pipeline demo'));
    expect(watcher).toContain(refused('submit tasks to pipeline demo'));
    expect(watcher).toContain('"troupe.tasks.demo"');
    for (const stderr of [cd, ana, watcher]) expect(stderr).toContain('a submitter of pipeline demo may');
    // A plain submit by the observer is refused as plainly, with no stack trace.
    const submitted = await troupe(['submit', 'demo', 'Write nothing'], await envOf('watcher'));
    expect(submitted.code, submitted.stdout).toBe(1);
    expect(submitted.stderr).toContain(
      'troupe: this NATS user may not submit tasks to pipeline demo (Permissions Violation for Publish to "troupe.tasks.demo"',
    );
    expect(submitted.stderr).not.toMatch(/\n\s+at /);
    // Nothing was made: the only task accepted meanwhile is the submitter's fork.
    await nc.flush();
    sub.unsubscribe();
    expect(heard.filter((e) => e.kind === 'task.accepted').map((e) => e.taskId)).toEqual([newId]);
  }, 150_000);

  it('serves the gateway on its own user: a task completes, its trace reads back, an approval is decided, a task cancelled', async () => {
    const gateway = startTroupe(['gateway', '--listen', '127.0.0.1:0', '--no-auth'], await envOf('front'));
    processes.push(gateway);
    await gateway.waitFor(/troupe gateway on http/, 30_000);
    const url = /gateway on (http:\/\/[\d.]+:\d+)/.exec(gateway.output())?.[1] ?? '';
    const done = await fetch(`${url}/v1/pipelines/demo/tasks?wait=60`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ goal: 'Write a short hello note in notes/hello.md' }),
    });
    const task = (await done.json()) as { taskId: string; status: string };
    expect(done.status, JSON.stringify(task)).toBe(200);
    expect(task.status).toBe('completed');
    const trace = await fetch(`${url}/v1/tasks/${task.taskId}/trace`);
    expect(trace.status).toBe(200);
    expect(JSON.stringify(await trace.json())).toContain('review');
    const listed = await fetch(`${url}/v1/tasks?pipeline=demo`);
    expect(JSON.stringify(await listed.json())).toContain(task.taskId);

    // A decision and a cancel over HTTP: the worker waiting on the approval is in an account of its own.
    const json = { 'content-type': 'application/json' };
    const submitGated = async (goal: string) => {
      const answer = await fetch(`${url}/v1/pipelines/gated/tasks`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ goal }),
      });
      return ((await answer.json()) as { taskId: string }).taskId;
    };
    const pendingOf = (taskId: string) =>
      vi.waitFor(
        async () => {
          const answer = await fetch(`${url}/v1/approvals?taskId=${taskId}`);
          const [request] = ((await answer.json()) as { requests: { id: string }[] }).requests;
          if (!request) throw new Error(`no approval for ${taskId} yet`);
          return request.id;
        },
        { timeout: 60_000, interval: 250 },
      );
    const statusOf = async (taskId: string) =>
      ((await (await fetch(`${url}/v1/tasks/${taskId}`)).json()) as { status: string }).status;
    const released = await submitGated('release over HTTP');
    const id = await pendingOf(released);
    const decided = await fetch(`${url}/v1/approvals/${id}`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ decision: 'allow', by: 'gw' }),
    });
    expect(await decided.json()).toMatchObject({ id, outcome: 'allowed' });
    await expect.poll(() => statusOf(released), { timeout: 60_000 }).toBe('completed');
    const stopped = await submitGated('release to cancel');
    await pendingOf(stopped);
    const cancel = await fetch(`${url}/v1/tasks/${stopped}/cancel`, {
      method: 'POST',
      headers: json,
      body: '{}',
    });
    expect(cancel.status).toBe(200);
    await expect.poll(() => statusOf(stopped), { timeout: 60_000 }).toBe('cancelled');
    expect(gateway.output()).not.toMatch(/Permissions Violation/i);
    // Its A2A push worker set up the queue of webhooks and takes from it on the gateway's own user.
    expect(gateway.output()).not.toMatch(/push notifications wait|cannot take push jobs/);
  }, 180_000);

  it('lets each role do what it is for', async () => {
    const allowed: [string, string][] = [
      ['ana', 'troupe.approvals.demo.t-1.ap-1'],
      ['ana', 'troupe.approvals.gated.t-1.ap-1'],
      ['ana', 'troupe.steer.gated.t-1'],
      ['bo', 'troupe.approvals.demo.t-1.ap-1'],
      ['bo', 'troupe.steer.demo.t-1'],
      ['front', 'troupe.steer.gated.t-1'],
      // A restart's or fork's input is checked against its origin version's schema.
      ['front', '$JS.API.DIRECT.GET.KV_versions.$KV.versions.demo.x'],
      ['executor', 'troupe.events.demo.t-1.tool.call'],
      ['coordinator', 'troupe.events.demo.t-1.task.completed'],
    ];
    for (const [role, subject] of allowed) {
      const { nc, violations } = await as(role);
      nc.publish(subject, '{}');
      // A refusal comes before the reply to the flush's ping; the status reader gets a turn to note it.
      await nc.flush();
      await new Promise((resolve) => setImmediate(resolve));
      expect(violations, `${role} → ${subject}`).toEqual([]);
    }
  });
});

describe('a worker started before any coordinator on a locked-down server', () => {
  it('waits for a coordinator to create the streams and buckets it may not create, then serves', async () => {
    const users = await writeNatsUsers([examplePath('demo.yaml'), '--worker', 'planner=demo:planner']);
    const nats = await startTestNats({ config: users.config });
    const home = await mkdtemp(join(tmpdir(), 'troupe-early-worker-'));
    const started: CliProcess[] = [];
    try {
      const worker = startTroupe(
        ['worker', examplePath('demo.yaml'), '--agents', 'planner', '--home', home],
        await users.env('planner', nats.url),
      );
      started.push(worker);
      await worker.waitFor(/waiting for a coordinator to create Troupe's streams and buckets/, 30_000);
      // One that is told to stop while it waits stops, at once and cleanly.
      const stopping = startTroupe(
        ['worker', examplePath('demo.yaml'), '--agents', 'planner', '--home', home],
        await users.env('planner', nats.url),
      );
      started.push(stopping);
      await stopping.waitFor(/waiting for a coordinator/, 30_000);
      expect(await stopping.stop('SIGTERM')).toBe(0);
      const up = startTroupe(
        ['up', examplePath('demo.yaml'), '--no-agents', '--home', home],
        await users.env('coordinator', nats.url),
      );
      started.push(up);
      await up.waitFor(/troupe is up/, 30_000);
      await worker.waitFor(/serving/, 30_000);
      // It was refused creating a stream, once, and said so; nothing else.
      const refused = [...worker.output().matchAll(/Permissions Violation for (\w+) to \\?"([^"\\]+)/g)].map(
        ([, operation, subject]) => `${operation} ${subject}`,
      );
      expect(new Set(refused)).toEqual(new Set(['Publish $JS.API.STREAM.CREATE.TASKS']));
    } finally {
      for (const p of started) await p.stop('SIGKILL');
      await nats.stop();
      await users.remove();
      await rm(home, { recursive: true, force: true });
    }
  }, 90_000);
});

/**
 * Evals on a server whose users `troupe nats-config` wrote for examples/evals/notes.yaml (with an `evals:` block that
 * scores every task online) and `longtool` (whose write's arguments are too long for their event: a recording of its
 * run needs the journal and the object store): the coordinator scores its tasks on its own user; an evaluator makes a
 * dataset of the pipeline's recorded runs and stores an experiment of it in `troupe-evals`, which the coordinator
 * made; the gateway lists them; an observer (limited to its pipelines, where a dataset may hold any pipeline's runs)
 * and a submitter may neither read nor write there.
 */
describe('evals with least privilege, from troupe nats-config', () => {
  let nats: TestNats;
  let users: NatsUsers;
  let dir: string;
  let pipeline: string;
  let scorers: string;
  const processes: CliProcess[] = [];
  const taskIds = ['roles-eval-1', 'roles-eval-2'];
  const BIG = 'z'.repeat(70_000);
  const envOf = (role: string) => users.env(role, nats.url);
  /** `troupe <args>` as `role`, in the pipeline's folder (where a stored dataset's scorers' paths start). */
  const as = async (role: string, args: string[]) => troupe(args, await envOf(role), 120_000, dir);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-roles-evals-'));
    pipeline = join(dir, 'notes.yaml');
    await writeFile(
      pipeline,
      `${await readFile(examplePath('evals/notes.yaml'), 'utf8')}
evals:
  sample: 1
  scorers:
    - { type: contains, value: notes/release.md }
`,
    );
    await copyFile(examplePath('evals/notes.script.yaml'), join(dir, 'notes.script.yaml'));
    scorers = join(dir, 'scorers.yaml');
    await writeFile(
      scorers,
      [
        'name: roles-notes',
        'scorers:',
        '  - { type: contains, value: notes/release.md }',
        '  - { type: cel, expr: \'tools.called("write_file") >= 1\' }',
        '',
      ].join('\n'),
    );
    // A worker that writes a long file and reads it back (as test/evalDatasets.test.ts's).
    const longtool = join(dir, 'longtool.yaml');
    await writeFile(
      join(dir, 'longtool.script.json'),
      JSON.stringify({
        agents: {
          worker: [
            { toolCalls: [{ name: 'write_file', arguments: { path: 'big.md', content: BIG } }] },
            { toolCalls: [{ name: 'read_file', arguments: { path: 'big.md' } }] },
            { content: 'read it all' },
          ],
        },
      }),
    );
    await writeFile(
      longtool,
      `version: 1
name: longtool
models: { scripted: { provider: scripted, script: ./longtool.script.json } }
defaults: { model: scripted }
agents:
  worker: { instructions: Write a long file and read it back., tools: [write_file, read_file] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    users = await writeNatsUsers([
      pipeline,
      longtool,
      ...['--submitter', 'ci=notes,longtool', '--observer', 'watcher=notes'],
      ...['--evaluator', 'judge=notes,longtool', '--evaluator', 'narrow=notes', '--gateway', 'front'],
    ]);
    expect(users.summary).toContain('judge: evaluator for pipelines notes, longtool');
    nats = await startTestNats({ config: users.config });
    // One coordinator hosting the agents: no worker role serves them.
    const up = startTroupe(
      ['up', pipeline, longtool, '--home', join(dir, 'home')],
      await envOf('coordinator'),
    );
    processes.push(up);
    await up.waitFor(/troupe is up/, 30_000);
    for (const taskId of taskIds) {
      const goal = `Write the release note for ${taskId}, which makes exports twice as fast.`;
      const submitted = await as('ci', ['submit', 'notes', goal, '--id', taskId, '--wait']);
      expect(submitted.code, submitted.stderr).toBe(0);
      expect(submitted.stdout).toContain('task.completed');
    }
    const long = await as('ci', ['submit', 'longtool', 'write it', '--id', 'roles-long-1', '--wait']);
    expect(long.code, long.stderr).toBe(0);
  }, 150_000);
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await nats?.stop();
    await users?.remove();
    await rm(dir, { recursive: true, force: true });
  });

  it('scores tasks online on the coordinator’s user, reading their events back from EVENTS', async () => {
    for (const taskId of taskIds) {
      await expect
        .poll(async () => (await as('watcher', ['logs', taskId])).stdout, { timeout: 30_000, interval: 500 })
        .toContain('eval.scored');
    }
    for (const p of processes) expect(p.output()).not.toMatch(/Permissions Violation|scoring .* failed/i);
  }, 90_000);

  let experimentId: string;
  /** The gateway's, on its own user. */
  let url: string;

  it('lets an evaluator make a dataset of its pipeline’s runs and store an experiment of it', async () => {
    const added = await as('judge', [
      ...['eval', 'dataset', 'add', 'roles-notes', '--from-runs', '--pipeline', 'notes'],
      ...['--status', 'completed', '--file', scorers],
    ]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toContain('stored dataset roles-notes version 1: 2 cases (2 recorded)');
    const run = await as('judge', [
      ...['eval', 'run', 'roles-notes', '--pipeline', pipeline, '--mode', 'replay'],
      ...['--name', 'roles-replay', '--format', 'json'],
    ]);
    expect(run.code, run.stderr).toBe(0);
    const experiment = JSON.parse(run.stdout) as { id: string; totals: { cases: number; passed: number } };
    expect(experiment.totals).toMatchObject({ cases: 2, passed: 2 });
    expect(run.stderr).toContain(`stored experiment ${experiment.id}`);
    experimentId = experiment.id;
    for (const result of [added, run]) expect(result.stderr).not.toMatch(/violation/i);
  }, 120_000);

  it('lets the gateway list datasets and experiments, and neither an observer nor a submitter read or write them', async () => {
    const gateway = startTroupe(['gateway', '--listen', '127.0.0.1:0', '--no-auth'], await envOf('front'));
    processes.push(gateway);
    await gateway.waitFor(/troupe gateway on http/, 30_000);
    url = /gateway on (http:\/\/[\d.]+:\d+)/.exec(gateway.output())?.[1] ?? '';
    const listed = await fetch(`${url}/v1/evals/datasets`);
    expect(listed.status).toBe(200);
    expect(await listed.json()).toMatchObject({ datasets: [{ name: 'roles-notes', version: 1, cases: 2 }] });
    const stored = await fetch(`${url}/v1/evals/experiments/${experimentId}`);
    expect(stored.status).toBe(200);
    expect(await stored.json()).toMatchObject({ id: experimentId, dataset: { name: 'roles-notes' } });
    expect(gateway.output()).not.toMatch(/Permissions Violation/i);

    // Reading: the observer of notes is refused even notes' datasets and experiments, as the submitter is; writing:
    // a dataset of the runs the observer may read, an experiment stored. Run side by side, as each CLI process takes
    // a second to start.
    const [
      observerLists,
      observerExperiments,
      observerShows,
      observerAdds,
      observerRuns,
      submitterLists,
      submitterAdds,
    ] = await Promise.all([
      as('watcher', ['eval', 'dataset', 'list']),
      as('watcher', ['eval', 'list']),
      as('watcher', ['eval', 'show', experimentId]),
      as('watcher', ['eval', 'dataset', 'add', 'watched', '--from-runs', '--pipeline', 'notes']),
      as('watcher', ['eval', 'run', 'roles-notes', '--pipeline', pipeline, '--mode', 'replay']),
      as('ci', ['eval', 'dataset', 'list']),
      as('ci', ['eval', 'dataset', 'add', 'submitted', '--from-runs', '--pipeline', 'notes']),
    ]);
    const refused = [
      ['watcher', observerLists],
      ['watcher', observerExperiments],
      ['watcher', observerShows],
      ['watcher', observerAdds],
      ['watcher', observerRuns],
      ['ci', submitterLists],
      ['ci', submitterAdds],
    ] as const;
    for (const [role, result] of refused) {
      expect(result.code, `${role}: ${result.stdout}${result.stderr}`).not.toBe(0);
      // Said plainly, with who may, and no stack trace.
      expect(result.stderr, role).toContain(
        'this NATS user may not read troupe-evals (Permissions Violation for Publish to "$',
      );
      expect(result.stderr, role).toContain('an evaluator or the gateway may (docs/permissions.md)');
      expect(result.stderr, role).not.toMatch(/\n\s+at /);
      expect(result.stdout, role).not.toContain('roles-notes');
    }
    for (const result of [observerLists, submitterLists])
      expect(result.stderr).toContain('"$JS.API.STREAM.INFO.OBJ_troupe-evals"');
    // Nothing was stored: the evaluator still sees its one dataset and one experiment.
    const [after, afterExperiments] = await Promise.all([
      as('judge', ['eval', 'dataset', 'list', '--json']),
      as('judge', ['eval', 'list']),
    ]);
    expect(
      after.stdout
        .trim()
        .split('\n')
        .map((line) => (JSON.parse(line) as { name: string }).name),
    ).toEqual(['roles-notes']);
    expect(afterExperiments.stdout).toContain(experimentId);
    expect(afterExperiments.stdout.match(/roles-notes/g)).toHaveLength(1);
    // The broker refuses it however it is sent: a chunk, a description or a purge of the bucket, published raw.
    for (const role of ['watcher', 'ci']) {
      const nc = await users.connect(role, nats.url, `forger-${role}`);
      const refusals: string[] = [];
      void (async () => {
        for await (const status of nc.status()) {
          if (status.type === 'error' && status.error instanceof PermissionViolationError)
            refusals.push(status.error.subject);
        }
      })();
      const forged = [
        '$O.troupe-evals.C.forged',
        '$O.troupe-evals.M.ZGF0YXNldHMvcm9sZXMtbm90ZXMvMQ==',
        '$JS.API.STREAM.PURGE.OBJ_troupe-evals',
      ];
      for (const subject of forged) nc.publish(subject, '{}');
      await expect.poll(() => refusals, { timeout: 5_000 }).toEqual(expect.arrayContaining(forged));
      await nc.close();
    }
  }, 180_000);

  it('lets an evaluator and the gateway keep a run whose recording needs the journal and the object store, and an evaluator of other pipelines not', async () => {
    const [added, narrow] = await Promise.all([
      as('judge', [
        'eval',
        'dataset',
        'add',
        'long-runs',
        '--tasks',
        'roles-long-1',
        '--pipeline',
        'longtool',
      ]),
      as('narrow', [
        'eval',
        'dataset',
        'add',
        'long-narrow',
        '--tasks',
        'roles-long-1',
        '--pipeline',
        'longtool',
      ]),
    ]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toContain('stored dataset long-runs version 1: 1 case (1 recorded)');
    const shown = await as('judge', ['eval', 'dataset', 'show', 'long-runs', '--json']);
    const [kept] = (JSON.parse(shown.stdout) as Dataset).cases;
    // The write's arguments, cut in their event, whole from the journal; the read's output from the object store.
    expect(Object.keys(kept?.recording?.journal ?? {})).toEqual(['roles-long-1.work.1.1.model']);
    expect(JSON.stringify(kept?.recording?.journal)).toContain(BIG);
    expect(Object.values(kept?.recording?.values ?? {}).join('')).toContain(BIG);
    // An evaluator of notes alone may not read longtool's runs: the task is skipped, saying why, and nothing stored.
    expect(narrow.code).toBe(2);
    expect(narrow.stderr).toContain('skipped task roles-long-1: cannot read it:');
    expect(narrow.stderr).toContain('Permissions Violation');
    expect(narrow.stderr).toContain('no version was stored');

    const body = JSON.stringify({ taskIds: ['roles-long-1'] });
    const post = await fetch(`${url}/v1/evals/datasets/long-gateway/cases`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(post.status, JSON.stringify(await post.clone().json())).toBe(201);
    expect(await post.json()).toMatchObject({
      dataset: { name: 'long-gateway', version: 1 },
      added: 1,
      skipped: [],
    });
    const stored = (await (await fetch(`${url}/v1/evals/datasets/long-gateway`)).json()) as Dataset;
    expect(stored.cases[0]?.recording?.journal).toEqual(kept?.recording?.journal);
  }, 120_000);
});

describe('troupe nats-config refuses roles that cannot work', () => {
  const config = (...args: string[]) =>
    troupe([
      'nats-config',
      examplePath('demo.yaml'),
      '--out',
      join(tmpdir(), 'troupe-never-written'),
      ...args,
    ]);

  it('names the pipeline or agent that is not there, and a name used twice or unusable', async () => {
    // Each on its own: run side by side, as each CLI process takes a second to start.
    const [pipeline, agent, twice, unusable, form] = await Promise.all([
      config('--submitter', 'ci=demo,dmeo'),
      config('--worker', 'w=demo:planner,writer'),
      config('--worker', 'ci=demo:planner', '--submitter', 'ci=demo'),
      config('--observer', 'Ops.Team=demo'),
      config('--approver', 'ana'),
    ]);
    expect(pipeline).toMatchObject({ code: 2, stderr: expect.stringContaining('no pipeline named "dmeo"') });
    expect(agent.stderr).toContain(
      'pipeline demo has no agent "writer" (it has planner, executor, reviewer)',
    );
    expect(twice.stderr).toContain('two roles are named "ci"');
    expect(unusable.stderr).toContain('"Ops.Team" cannot name a NATS user here');
    expect(form.stderr).toContain('--approver takes <name>=<pipeline>[,<pipeline>…]');
    for (const result of [agent, twice, unusable, form]) expect(result.code).toBe(2);
  });
});
