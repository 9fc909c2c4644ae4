import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, subjects } from '@troupe/protocol';
import type { TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { facts, fixturePath, ofKind, waiter } from './support/harness.ts';
import { type KillTestServer, SERVERS, startKillTestServer } from './support/natsUsers.ts';

const script = (writer: string, last: { agent: string; content: string }) => `agents:
  recorder:
    - toolCalls: [{ name: run_command, arguments: { command: "echo record >> ledger.txt" } }]
    - content: recorded
  thinker:
    - { content: thought it over, delayMs: 6000 }
  writer:
    - content: ${writer}
    - content: ${writer}
  checker:
    - { content: '{"decision": "approve", "feedback": "ok"}', delayMs: 6000 }
  ${last.agent}:
    - content: ${last.content}
`;

/** Version 2 of test/fixtures/versioned.yaml: a prompt changed, an agent renamed, a step removed, a step added. */
function secondVersion(text: string): string {
  const edits: [string, string][] = [
    ['writer: { instructions: Write the note. }', 'writer: { instructions: Write the note well. }'],
    ['finisher: { instructions: Finish up. }', 'closer: { instructions: Close up. }'],
    [`  - { id: think, kind: agent, agent: thinker, when: "input.path == 'agent'" }\n`, ''],
    [
      '  - { id: finish, kind: agent, agent: finisher }',
      '  - { id: close, kind: agent, agent: closer }\n  - { id: extra, kind: agent, agent: writer }',
    ],
  ];
  return edits.reduce((edited, [from, to]) => {
    if (!edited.includes(from)) throw new Error(`the fixture has no "${from}" to edit`);
    return edited.replace(from, to);
  }, text);
}

/**
 * A deploy of a changed pipeline while its tasks are in flight: a coordinator killed with SIGKILL while its tasks
 * wait in a slow agent step, a parallel step with one branch done, a person's question and a slow review, then
 * started again on the edited file. Every task ends on the version it started on, no step run again; new tasks run on
 * the new version; and a coordinator of a third version started beside it makes that the version of every new task,
 * which the second one ends once the third is killed in their middle.
 */
describe.each(SERVERS)(
  'deploying a changed pipeline under in-flight tasks, on $server',
  ({ users: withUsers }) => {
    let server: KillTestServer;
    let nats: TestNats;
    let client: NatsConnection;
    let coordinatorEnv = cliEnv();
    /** The test's own user, a coordinator's: `troupe migrate` sends on the control subjects. */
    let harnessEnv = cliEnv();
    let approverEnv = cliEnv();
    /** Every process the test started, killed or not. */
    const everyProcess: CliProcess[] = [];
    let dir: string;
    let home: string;
    const processes: CliProcess[] = [];
    const { notify, waitFor: until } = waiter();

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'troupe-deploy-'));
      home = join(dir, 'home');
      server = await startKillTestServer(fixturePath('versioned.yaml'), withUsers, 'deploy-test', notify);
      ({ nats, client } = server);
      coordinatorEnv = server.env.coordinator;
      harnessEnv = server.env.harness;
      approverEnv = server.env.approver;
    });
    afterEach(() => {
      // Nothing any part needed was refused it.
      for (const p of everyProcess.splice(0)) expect(p.output()).not.toMatch(/Permissions Violation/i);
    });
    afterAll(async () => {
      for (const p of processes.splice(0)) await p.stop('SIGKILL');
      await server?.stop();
      await rm(dir, { recursive: true, force: true });
    });

    const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
    const ended = (taskId: string) => eventsOf(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind));
    const started = (taskId: string, step: string) =>
      ofKind(eventsOf(taskId), 'step.started').filter((e) => e.data.step === step);
    const up = (file: string) => {
      const p = startTroupe(
        ['up', file, '--ack-wait', '2', '--server', nats.url, '--home', home],
        // At info, a coordinator says when it follows the registry to another version.
        { ...coordinatorEnv, TROUPE_LOG_LEVEL: 'info' },
      );
      processes.push(p);
      everyProcess.push(p);
      return p;
    };
    const submit = (id: string, path: string) =>
      jetstream(client).publish(
        subjects.task('versioned'),
        JSON.stringify({ id, goal: 'go', input: { path } }),
        {
          msgID: id,
        },
      );
    const versionOf = async (taskId: string) =>
      (await (await new Kvm(client).open(BUCKETS.workflows)).get(taskId))?.json<{ version?: string }>()
        .version;
    /**
     * Whether the task's record holds `text` (a step's output): the checkpoint after that step is stored, which may
     * come up to 20 ms after the next step's events when both steps run in the coordinator's process.
     */
    const recordHolds = async (taskId: string, text: string) =>
      JSON.stringify((await (await new Kvm(client).open(BUCKETS.workflows)).get(taskId))?.json()).includes(
        text,
      );
    const ledger = async (taskId: string) =>
      (await readFile(join(home, 'workspaces', 'versioned', taskId, 'ledger.txt'), 'utf8'))
        .split('\n')
        .filter(Boolean);

    it('ends every in-flight task on its old version with no step repeated, and starts new ones on the new', async () => {
      const file = join(dir, 'versioned.yaml');
      await copyFile(fixturePath('versioned.yaml'), file);
      await copyFile(fixturePath('versioned.script.yaml'), join(dir, 'versioned.script.yaml'));
      const first = up(file);
      await first.waitFor(/troupe is up/);
      const inFlight = { agent: 'v-agent', fork: 'v-fork', human: 'v-human', review: 'v-review' };
      for (const [path, id] of Object.entries(inFlight)) await submit(id, path);
      // One more waiting on a person, to be moved to version 2 on purpose.
      await submit('v-move', 'human');
      // Killed with each task inside its step: the slow agent, the long branch (the short one done), the question,
      // the slow review.
      await until(
        () =>
          started(inFlight.agent, 'think').length > 0 &&
          ofKind(eventsOf(inFlight.fork), 'step.completed').some((e) => e.data.step === 'note') &&
          started(inFlight.fork, 'ponder').length > 0 &&
          ofKind(eventsOf(inFlight.human), 'human.asked').length > 0 &&
          ofKind(eventsOf('v-move'), 'human.asked').length > 0 &&
          started(inFlight.review, 'check').length > 0
            ? true
            : undefined,
        'every task to be inside its step',
        30_000,
      );
      // And each one's checkpoint there stored: the output of the step before it on record.
      for (const [id, output] of [
        [inFlight.agent, 'recorded'],
        [inFlight.fork, 'noted by v1'],
        [inFlight.review, 'recorded'],
      ] as const)
        await expect.poll(() => recordHolds(id, output), { timeout: 10_000, message: id }).toBe(true);
      await first.stop('SIGKILL');
      processes.splice(processes.indexOf(first), 1);
      const v1 = await versionOf(inFlight.agent);
      expect(v1).toMatch(/^[0-9a-f]{64}$/);
      for (const id of Object.values(inFlight)) expect(await versionOf(id), id).toBe(v1);

      // The deploy: the file and its script edited in place, the coordinator started again on them.
      await writeFile(file, secondVersion(await readFile(file, 'utf8')));
      await writeFile(
        join(dir, 'versioned.script.yaml'),
        script('noted by v2', { agent: 'closer', content: 'closed by v2' }),
      );
      const second = up(file);
      await second.waitFor(/troupe is up/);
      // troupe migrate: refused for the task inside the step version 2 removed, saying why; done for the one waiting
      // on a person, whose done steps version 2 keeps unchanged. Each asked of the coordinator once it runs the task.
      const migrate = (taskId: string) =>
        troupe(['migrate', taskId, '--latest', '--server', nats.url], harnessEnv);
      let refused = await migrate(inFlight.agent);
      await expect
        .poll(
          async () => {
            if (!/not_running|no coordinator runs it/.test(refused.stderr)) return refused.stderr;
            refused = await migrate(inFlight.agent);
            return refused.stderr;
          },
          { timeout: 20_000, interval: 200 },
        )
        .toContain('its checkpoint does not fit the version asked for');
      expect(refused.code).toBe(1);
      let moved = await migrate('v-move');
      await expect
        .poll(
          async () => {
            if (moved.code !== 0) moved = await migrate('v-move');
            return moved.code;
          },
          { timeout: 20_000, interval: 200 },
        )
        .toBe(0);
      expect(moved.stdout).toMatch(
        /^v-move: moved from version [0-9a-f]{12} to [0-9a-f]{12}; it resumes there$/m,
      );
      await expect.poll(() => versionOf('v-move')).not.toBe(v1);

      const question = ofKind(eventsOf(inFlight.human), 'human.asked')[0];
      const answered = await troupe(
        ['answer', String(question?.data.questionId), '{"go": true}', '--server', nats.url],
        approverEnv,
      );
      expect(answered.stdout).toMatch(/recorded|answered/);
      for (const id of Object.values(inFlight)) await until(() => ended(id), `${id} to end`, 60_000);

      for (const id of Object.values(inFlight)) {
        const mine = eventsOf(id);
        // Ended as version 1 ends: by its finisher, an agent version 2 renamed, on version 1's script.
        expect(ended(id), id).toMatchObject({ kind: 'task.completed', data: { output: 'finished by v1' } });
        expect(ofKind(mine, 'task.resumed'), id).toHaveLength(1);
        expect(started(id, 'record'), id).toHaveLength(1);
        expect(await ledger(id), id).toEqual(['record']);
        expect(started(id, 'close'), id).toHaveLength(0);
        expect(started(id, 'extra'), id).toHaveLength(0);
        expect(await versionOf(id), id).toBe(v1);
      }
      // The step version 2 removed ran for the task inside it; the branch done before the kill did not run again.
      expect(
        ofKind(eventsOf(inFlight.agent), 'step.completed').find((e) => e.data.step === 'think')?.data.ok,
      ).toBe(true);
      expect(started(inFlight.fork, 'note')).toHaveLength(1);
      // One question: the restored step announces it again, under the same id.
      expect(ofKind(facts(eventsOf(inFlight.human)), 'human.asked')).toHaveLength(1);

      // The moved task asks again on version 2 (the question stays the same one) and ends as version 2 ends.
      const asked = ofKind(eventsOf('v-move'), 'human.asked').at(-1);
      const reply = await troupe(
        ['answer', String(asked?.data.questionId), '{"go": true}', '--server', nats.url],
        approverEnv,
      );
      expect(reply.stdout, reply.stderr).toMatch(/recorded|answered/);
      await until(() => ended('v-move'), 'v-move to end', 30_000);
      expect(ended('v-move')).toMatchObject({ kind: 'task.completed', data: { output: 'noted by v2' } });
      expect(started('v-move', 'record')).toHaveLength(1);
      expect(ofKind(facts(eventsOf('v-move')), 'human.asked')).toHaveLength(1);
      expect(await ledger('v-move')).toEqual(['record']);

      // A new task runs on version 2: its renamed agent, its added step, its script.
      await submit('v-new', 'none');
      await until(() => ended('v-new'), 'v-new to end', 30_000);
      expect(ended('v-new')).toMatchObject({ kind: 'task.completed', data: { output: 'noted by v2' } });
      expect(ofKind(eventsOf('v-new'), 'step.completed').map((e) => e.data.step)).toEqual([
        'record',
        'close',
        'extra',
      ]);
      const v2 = await versionOf('v-new');
      expect(v2).toMatch(/^[0-9a-f]{64}$/);
      expect(v2).not.toBe(v1);

      // A rolling restart: a coordinator of version 3 (the writer's script changed again) starts beside version 2's.
      // It is the newest now: every new task starts on it, whichever of the two takes it. Then it is killed with the
      // tasks in their slow review, so version 2's coordinator (the only one left) ends them all, on version 3.
      // Version 2's coordinator follows the registry by reading it every second: the shared tasks are submitted once
      // it has read version 3 as the newest, as a deploy waits for its coordinators to be up.
      const followed = () =>
        second.output().match(/new tasks start on version \w+, as the registry now says/g)?.length ?? 0;
      const followedBefore = followed();
      const thirdDir = await mkdtemp(join(dir, 'v3-'));
      await copyFile(file, join(thirdDir, 'versioned.yaml'));
      await writeFile(
        join(thirdDir, 'versioned.script.yaml'),
        script('noted by v3', { agent: 'closer', content: 'closed by v3' }),
      );
      const beside = up(join(thirdDir, 'versioned.yaml'));
      await beside.waitFor(/troupe is up/);
      await expect
        .poll(followed, {
          timeout: 15_000,
          message: "version 2's coordinator to read version 3 as the newest",
        })
        .toBeGreaterThan(followedBefore);
      const shared = Array.from({ length: 8 }, (_, i) => `v-shared-${i}`);
      for (const id of shared) await submit(id, 'review');
      await until(
        () => (shared.every((id) => started(id, 'check').length > 0) ? true : undefined),
        'every shared task to be in its review',
        30_000,
      );
      for (const id of shared)
        await expect.poll(() => recordHolds(id, 'recorded'), { timeout: 10_000, message: id }).toBe(true);
      await beside.stop('SIGKILL');
      processes.splice(processes.indexOf(beside), 1);
      for (const id of shared) await until(() => ended(id), `${id} to end`, 60_000);
      const v3 = await versionOf(shared[0] ?? '');
      expect(v3).not.toBe(v2);
      for (const id of shared) {
        expect(ended(id), id).toMatchObject({ kind: 'task.completed', data: { output: 'noted by v3' } });
        expect(await versionOf(id), id).toBe(v3);
        expect(started(id, 'record'), id).toHaveLength(1);
        expect(started(id, 'close'), id).toHaveLength(1);
        expect(await ledger(id), id).toEqual(['record']);
      }
    }, 180_000);
  },
);
