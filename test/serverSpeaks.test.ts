import { AckPolicy, jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection, nkeyAuthenticator, nkeys } from '@nats-io/transport-node';
import {
  accountsBlock,
  authorizationBlock,
  type ConfiguredUser,
  inboxOf,
  permissionsOf,
  type Role,
} from '@troupe/coordinator';
import { BUCKETS, STREAMS } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Issue 28: no role can make nats-server speak for it. Every role may send some JetStream API request, and the
 * server sends its answer to whatever reply subject the request names, checking no permission; with a key of its
 * own to store bytes in, a role could have the server publish them anywhere. Each forgery below is tried against
 * the `authorization` block Troupe wrote before (where it must get through, or the test proves nothing) and the
 * `accounts` block it writes now (where it may not).
 */
const ROLES: Role[] = [
  { kind: 'coordinator', name: 'core' },
  { kind: 'worker', name: 'planner', pipeline: 'demo', agents: ['planner'] },
  { kind: 'worker', name: 'executor', pipeline: 'demo', agents: ['executor'] },
  { kind: 'worker', name: 'releaser', pipeline: 'gated', agents: ['executor'] },
  { kind: 'submitter', name: 'ci', pipelines: ['demo', 'gated'] },
  { kind: 'observer', name: 'watcher', pipelines: ['demo'] },
  { kind: 'approver', name: 'ana', pipelines: ['demo'] },
  { kind: 'gateway', name: 'front' },
];
const PIPELINES = ['demo', 'gated'];

const seeds = new Map(ROLES.map((role) => [role.name, nkeys.createUser()]));
const users: ConfiguredUser[] = ROLES.map((role) => ({
  role,
  nkey: (seeds.get(role.name) as ReturnType<typeof nkeys.createUser>).getPublicKey(),
}));

const CONFIGS = [
  { block: 'authorization', config: authorizationBlock(users, 1, PIPELINES), forged: true },
  { block: 'accounts', config: accountsBlock(users, 1, PIPELINES), forged: false },
] as const;

/** A message a forgery would put where a victim listens: a step, a task ending, a decision, a cancel, a task. */
const FORGED = JSON.stringify({ forged: true, goal: 'run what nobody asked for' });

describe.each(CONFIGS)(
  'a role making nats-server speak for it, under the $block block',
  ({ config, forged }) => {
    let nats: TestNats;
    const open: NatsConnection[] = [];
    const as = async (name: string) => {
      const seed = seeds.get(name)?.getSeed() as Uint8Array;
      const nc = await connect({
        servers: nats.url,
        authenticator: nkeyAuthenticator(seed),
        inboxPrefix: inboxOf(name),
        name: `forger-${name}`,
      });
      open.push(nc);
      return nc;
    };

    beforeAll(async () => {
      nats = await startTestNats({ config });
      // What a coordinator makes at start: the buckets and streams the forgeries use.
      const core = await as('core');
      const kvm = new Kvm(core);
      // Every bucket Troupe keeps, so a role's request on a new one is tried too.
      for (const bucket of Object.values(BUCKETS)) {
        await kvm.create(bucket, { history: 1 });
      }
      const jsm = await jetstreamManager(core);
      for (const [name, subject] of [
        [STREAMS.tasks, 'troupe.tasks.>'],
        [STREAMS.events, 'troupe.events.>'],
      ] as const) {
        await jsm.streams.add({
          name,
          subjects: [subject],
          retention: RetentionPolicy.Limits,
          storage: StorageType.File,
        });
      }
      // A pull consumer for the roles' fetches to name.
      await jsm.consumers.add(STREAMS.events, { durable_name: 'x', ack_policy: AckPolicy.Explicit });
      await (await kvm.open('workflows')).put(
        'running-1',
        JSON.stringify({ taskId: 'running-1', status: 'running' }),
      );
    }, 60_000);
    afterAll(async () => {
      for (const nc of open.splice(0)) await nc.close();
      await nats?.stop();
    });

    /**
     * Has `attacker` store FORGED under its own key of `bucket`, then asks the server for it with `target` as the
     * reply subject, and says whether `victim`, listening on `target` (in `queue` where its permissions say so), got it.
     */
    const forge = async (
      attacker: string,
      bucket: string,
      key: string,
      target: string,
      victim: string,
      queue?: string,
    ): Promise<boolean> => {
      const heard: string[] = [];
      const listener = await as(victim);
      listener.subscribe(target, {
        ...(queue ? { queue } : {}),
        callback: (_, m) => void heard.push(m.string()),
      });
      await listener.flush();
      const nc = await as(attacker);
      const subject = `$KV.${bucket}.${key}`;
      await nc.request(subject, FORGED, { timeout: 5_000 });
      const get = `$JS.API.DIRECT.GET.KV_${bucket}.${subject}`;
      nc.publish(get, '', { reply: target });
      // The same request answered to the asker: the server answered the forged one first (one stream, in order).
      await nc.request(get, '', { timeout: 5_000 });
      if (forged) await expect.poll(() => heard.length).toBeGreaterThan(0);
      await listener.flush();
      return heard.includes(FORGED);
    };

    it("puts a forged step request where pipeline demo's executor takes its steps", async () => {
      const executor = 'troupe.agents.demo.executor';
      expect(await forge('planner', 'journal', 'demo.s1', executor, 'executor', 'troupe-demo-executor')).toBe(
        forged,
      );
    });

    it('puts a forged task.completed where submit --wait of pipeline gated listens, from a worker or an approver', async () => {
      const ending = 'troupe.events.gated.t-1.task.completed';
      expect(await forge('planner', 'journal', 'demo.s2', ending, 'ci')).toBe(forged);
      expect(await forge('ana', 'approvals', 'demo.a2', ending, 'ci')).toBe(forged);
      // Its own pipeline's: the worker may publish demo's events, all but a task's ending, and its import covers them
      // all (a wildcard): the answer is not passed on through it.
      expect(
        await forge('planner', 'journal', 'demo.s6', 'troupe.events.demo.t-2.task.completed', 'ci'),
      ).toBe(forged);
    });

    it("puts a forged decision where pipeline gated's worker waits for its approvals", async () => {
      const decision = 'troupe.approvals.gated.t-1.ap-1';
      expect(await forge('planner', 'journal', 'demo.s3', decision, 'releaser')).toBe(forged);
    });

    it('puts a forged cancel and a forged task where the coordinators take them', async () => {
      expect(await forge('planner', 'journal', 'demo.s4', 'troupe.control.running-1', 'core')).toBe(forged);
      expect(await forge('planner', 'journal', 'demo.s5', 'troupe.tasks.gated', 'core')).toBe(forged);
    });

    it("overwrites a running task's workflows record with the answer to $JS.API.INFO, from a submitter or an observer", async () => {
      const core = await as('core');
      const workflows = await new Kvm(core).open('workflows');
      const before = (await workflows.get('running-1'))?.revision;
      for (const role of ['ci', 'watcher']) {
        const nc = await as(role);
        nc.publish('$JS.API.INFO', '', { reply: '$KV.workflows.running-1' });
        await nc.request('$JS.API.INFO', '', { timeout: 5_000 });
      }
      // A write after them: once it is stored, so is whatever they sent there before.
      await workflows.put('sentinel', '{}');
      if (forged)
        await expect.poll(async () => (await workflows.get('running-1'))?.revision).not.toBe(before);
      const after = await workflows.get('running-1');
      expect(after?.revision !== before).toBe(forged);
      if (!forged) expect(after?.json()).toEqual({ taskId: 'running-1', status: 'running' });
    });

    it('passes on into TROUPE only what a role may say itself: an answer aimed at a subject it publishes to', async () => {
      // nats-server passes an answer aimed at one of the role's own imports (by its literal name) on through it:
      // the copy arrives as if the role had published it, on a subject its permissions already let it use.
      const ci = ROLES.find((role) => role.name === 'ci') as Role;
      expect(permissionsOf(ci, { coordinators: ['core'], pipelines: PIPELINES }).publish.allow).toContain(
        'troupe.tasks.demo',
      );
      const heard: { data: string; reply: string | undefined }[] = [];
      const core = await as('core');
      core.subscribe('troupe.tasks.demo', {
        callback: (_, m) => void heard.push({ data: m.string(), reply: m.reply }),
      });
      await core.flush();
      const nc = await as('ci');
      nc.publish('$JS.API.INFO', '', { reply: 'troupe.tasks.demo' });
      await nc.request('$JS.API.INFO', '', { timeout: 5_000 });
      await expect.poll(() => heard.length).toBe(1);
      // An account's info, with no reply subject: a task the coordinators refuse, as they would ci's own.
      expect(heard[0]).toMatchObject({
        data: expect.stringContaining('account_info_response'),
        reply: '',
      });
    });

    it("has an observer's consumer of EVENTS deliver real events only, which no bucket stores", async () => {
      // nats-server does not check a push consumer's deliver subject (nats-server#8274); the consumer lives in
      // TROUPE whichever account asked. What it can deliver is stored events, never bytes a role chose.
      const core = await as('core');
      const workflows = await new Kvm(core).open('workflows');
      const before = await workflows.get('running-1');
      const watcher = await as('watcher');
      const create = async (name: string, deliver: string) =>
        watcher.request(
          `$JS.API.CONSUMER.CREATE.${STREAMS.events}.${name}.troupe.events.demo.>`,
          JSON.stringify({
            stream_name: STREAMS.events,
            config: {
              name,
              deliver_subject: deliver,
              filter_subject: 'troupe.events.demo.>',
              ack_policy: 'none',
              deliver_policy: 'all',
            },
          }),
          { timeout: 5_000 },
        );
      await create('aimed', '$KV.workflows.running-1');
      // A second consumer, delivering where the test listens: once it has delivered, so has the first.
      const heard: string[] = [];
      const sub = core.subscribe('troupe._inbox.core.seen', {
        callback: (_, m) => void heard.push(m.subject),
      });
      await core.flush();
      await core.request('troupe.events.demo.t-3.llm.request', '{"kind":"llm.request"}', { timeout: 5_000 });
      await create('seen', 'troupe._inbox.core.seen');
      await expect.poll(() => heard.length).toBeGreaterThan(0);
      sub.unsubscribe();
      await workflows.put('sentinel', '{}');
      expect((await workflows.get('running-1'))?.revision).toBe(before?.revision);
    });

    it('gets no answer of any JetStream API request a role may send to where a coordinator listens', async () => {
      const probe = 'troupe.tasks.probe';
      const heard: string[] = [];
      const core = await as('core');
      core.subscribe(probe, { callback: (_, m) => void heard.push(m.subject) });
      await core.flush();
      const tried: string[] = [];
      const unanswered: string[] = [];
      for (const role of ROLES.filter((r) => r.kind !== 'coordinator')) {
        const nc = await as(role.name);
        const allowed = permissionsOf(role, { coordinators: ['core'], pipelines: PIPELINES }).publish.allow;
        for (const pattern of allowed.filter((s) => s.startsWith('$JS.API.'))) {
          const subject = pattern.replaceAll('*', 'x').replace(/>$/, 'x');
          // A fetch that waits for no message, so it is answered at once.
          const body = subject.includes('.MSG.NEXT.') ? '{"batch":1,"no_wait":true}' : '{}';
          nc.publish(subject, body, { reply: probe });
          // The same request with the asker's own inbox: answered after the forged one (one handler, in order).
          const answered = await nc.request(subject, body, { timeout: 2_000 }).then(
            () => true,
            () => false,
          );
          if (answered) tried.push(`${role.name} ${subject}`);
          else unanswered.push(`${role.name} ${subject}`);
        }
      }
      // Every request the roles may send, each answered: streams' info, direct and message gets, consumers. A fetch
      // from the test's consumer may go unanswered (it hands out real events only, which no role chose).
      expect(unanswered.filter((request) => !request.includes('.MSG.NEXT.'))).toEqual([]);
      expect(tried.length).toBeGreaterThan(90);
      if (forged) await expect.poll(() => heard.length).toBeGreaterThanOrEqual(tried.length);
      await core.flush();
      expect(heard.length > 0).toBe(forged);
    }, 300_000);
  },
);
