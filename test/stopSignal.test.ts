import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_STOP_TIMEOUT_MS } from '@troupe/coordinator';
import { BUCKETS, WorkflowRecord } from '@troupe/protocol';
import { createLogger, KvStore, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath, fixturePath } from './support/harness.ts';

/** How long into an outage the second stop comes: as long as the one the issue found `troupe up` hanging in. */
const OUTAGE_MS = 3_000;
/** How long past the documented bound a process is given before the test calls it hung (and kills it). */
const HUNG_AFTER_MS = DEFAULT_STOP_TIMEOUT_MS + 5_000;

interface Stopped {
  /** The exit code, or `hung` when the process was still running past {@link HUNG_AFTER_MS}. */
  code: number | 'hung';
  /** Whether it exited within the documented bound (`--stop-timeout`, 20 s by default). */
  inTime: boolean;
}

/**
 * Issue 27, item 2: a stop signal ends every long-running Troupe process within the documented bound whatever NATS
 * is doing: when its server dies, a few seconds into the outage, and while it waits for the server to start. A
 * clean stop (exit 0) is expected in each case, not one cut short by the bound: the waits on NATS end by themselves.
 */
describe('a stop signal while NATS is out', () => {
  let nats: TestNats;
  let dir: string;
  let running: CliProcess[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    dir = await mkdtemp(join(tmpdir(), 'troupe-stop-'));
  });
  afterEach(async () => {
    // Whatever a failed test left running is ended, by its own pid.
    await Promise.all(running.map((p) => p.stop('SIGKILL')));
    running = [];
  });
  afterAll(async () => {
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const env = () => cliEnv({ NATS_URL: nats.url });
  const start = (args: string[]): CliProcess => {
    const child = startTroupe(args, env());
    running.push(child);
    return child;
  };

  /** A task's status as its record says, read over a connection of its own; undefined while it cannot be read. */
  async function statusOf(taskId: string): Promise<string | undefined> {
    const bus = await NatsBus.connect({
      servers: nats.url,
      name: 'stop-test',
      logger: createLogger({ level: 'silent' }),
    });
    try {
      const records = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
      return (await records.get(taskId).catch(() => undefined))?.value.status;
    } finally {
      await bus.close();
    }
  }

  /** `troupe up` (with a task in the middle of a 12 s model call), a worker, a gateway and a tail, all on `nats`. */
  async function startEveryCommand(round: string): Promise<Record<string, CliProcess>> {
    await nats.resume();
    const up = start([
      'up',
      examplePath('demo.yaml'),
      fixturePath('lingering.yaml'),
      '--home',
      join(dir, `up-${round}`),
    ]);
    const worker = start(['worker', examplePath('demo.yaml'), '--home', join(dir, `worker-${round}`)]);
    const gateway = start(['gateway', '--listen', '127.0.0.1:0', '--no-auth']);
    await up.waitFor(/troupe is up on/);
    const tail = start(['tail', '--json']);
    await Promise.all([
      worker.waitFor(/troupe worker on .* serving/),
      gateway.waitFor(/troupe gateway on http/),
      tail.waitFor(/watching all tasks/),
    ]);
    // A task in hand when NATS goes: its model call takes 12 s.
    const submitted = await troupe(['submit', 'lingering', 'think', '--id', `in-hand-${round}`], env());
    expect(submitted.code, submitted.stderr).toBe(0);
    await tail.waitFor(new RegExp(`"taskId":"in-hand-${round}".*"kind":"step\\.started"`));
    return { up, worker, gateway, tail };
  }

  /** Kills the NATS server as a crash would (the processes see their connection drop, nothing more). */
  async function crashNats(): Promise<void> {
    process.kill(nats.pid, 'SIGKILL');
    await nats.pause();
  }

  /** Sends each process SIGTERM at once, and says how each ended. */
  async function stopAll(processes: Record<string, CliProcess>): Promise<Record<string, Stopped>> {
    const stopping = Object.entries(processes).map(async ([name, p]) => {
      const began = performance.now();
      p.child.kill('SIGTERM');
      const code = await Promise.race([
        p.exited(),
        new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), HUNG_AFTER_MS).unref()),
      ]);
      const ms = performance.now() - began;
      if (process.env.TROUPE_TEST_STOP_TIMES) console.log(`${name} stopped in ${Math.round(ms)} ms`);
      const stopped: Stopped = { code: code ?? -1, inTime: code !== 'hung' && ms < DEFAULT_STOP_TIMEOUT_MS };
      return [name, stopped] as const;
    });
    return Object.fromEntries(await Promise.all(stopping));
  }

  const everyOneStopped = { code: 0, inTime: true };
  const allStoppedCleanly = {
    up: everyOneStopped,
    worker: everyOneStopped,
    gateway: everyOneStopped,
    tail: everyOneStopped,
  };

  /** Stops every command, and expects each to have exited 0 within the bound (their output is the message if not). */
  async function expectEveryOneStopsCleanly(processes: Record<string, CliProcess>): Promise<void> {
    const stopped = await stopAll(processes);
    expect(
      stopped,
      Object.values(processes)
        .map((p) => p.output())
        .join('\n---\n'),
    ).toEqual(allStoppedCleanly);
  }

  it('ends up, worker, gateway and tail when the signal comes the moment the server dies', async () => {
    const processes = await startEveryCommand('crash');
    await crashNats();
    await expectEveryOneStopsCleanly(processes);
  }, 90_000);

  it(`ends up, worker, gateway and tail when the signal comes ${OUTAGE_MS / 1000} s into an outage`, async () => {
    const processes = await startEveryCommand('outage');
    await crashNats();
    await Promise.all(
      ['up', 'worker', 'gateway'].map((name) => processes[name]?.waitFor(/disconnected from NATS/)),
    );
    // The outage lasts this long before the stop: the scenario, not a wait for something to happen.
    await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));
    await expectEveryOneStopsCleanly(processes);
  }, 90_000);

  it('leaves a task it could not hand back to redelivery: the next coordinator runs it to its end', async () => {
    await nats.resume();
    // A short ack wait, so the task left unacknowledged comes back soon.
    const up = start([
      'up',
      fixturePath('pondering.yaml'),
      '--ack-wait',
      '2',
      '--home',
      join(dir, 'up-left'),
    ]);
    await up.waitFor(/troupe is up on/);
    const tail = start(['tail', '--json']);
    await tail.waitFor(/watching all tasks/);
    const submitted = await troupe(['submit', 'pondering', 'ponder', '--id', 'left-1'], env());
    expect(submitted.code, submitted.stderr).toBe(0);
    await tail.waitFor(/"taskId":"left-1".*"kind":"step\.started"/);
    await crashNats();
    expect(await stopAll({ up, tail }), up.output()).toEqual({ up: everyOneStopped, tail: everyOneStopped });

    await nats.resume();
    const next = start([
      'up',
      fixturePath('pondering.yaml'),
      '--ack-wait',
      '2',
      '--home',
      join(dir, 'up-next'),
    ]);
    await next.waitFor(/troupe is up on/);
    await expect.poll(() => statusOf('left-1'), { timeout: 30_000, interval: 250 }).toBe('completed');
  }, 90_000);

  it('hands a task back when NATS returns during the stop, so the next coordinator need not wait out the ack wait', async () => {
    await nats.resume();
    // The default ack wait (30 s): only a hand-back brings the task to the next coordinator sooner.
    const up = start(['up', fixturePath('pondering.yaml'), '--home', join(dir, 'up-back')]);
    await up.waitFor(/troupe is up on/);
    const tail = start(['tail', '--json']);
    await tail.waitFor(/watching all tasks/);
    const submitted = await troupe(['submit', 'pondering', 'ponder', '--id', 'back-1'], env());
    expect(submitted.code, submitted.stderr).toBe(0);
    await tail.waitFor(/"taskId":"back-1".*"kind":"step\.started"/);
    await crashNats();
    const stopping = stopAll({ up, tail });
    await nats.resume();
    expect(await stopping, up.output()).toEqual({ up: everyOneStopped, tail: everyOneStopped });
    expect(up.output()).not.toContain('had not handed back');

    const next = start(['up', fixturePath('pondering.yaml'), '--home', join(dir, 'up-after-back')]);
    await next.waitFor(/troupe is up on/);
    // Its 4 s step runs again from the start: well inside the 30 s a task left to redelivery would wait first.
    await expect.poll(() => statusOf('back-1'), { timeout: 15_000, interval: 250 }).toBe('completed');
  }, 90_000);

  it('ends up and worker started while the server is down, as they wait for it', async () => {
    await nats.pause();
    const up = start(['up', examplePath('demo.yaml'), '--home', join(dir, 'up-waiting')]);
    const worker = start(['worker', examplePath('demo.yaml'), '--home', join(dir, 'worker-waiting')]);
    await Promise.all([
      up.waitFor(/cannot reach NATS at .* yet/),
      worker.waitFor(/cannot reach NATS at .* yet/),
    ]);
    const stopped = await stopAll({ up, worker });
    expect(stopped).toEqual({ up: everyOneStopped, worker: everyOneStopped });
  }, 60_000);
});
