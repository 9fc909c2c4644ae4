import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { eventsInMessage, ofKind } from './support/harness.ts';

/** A pipeline whose tasks take another path by `input.path`: a slow agent, a person's question, or straight on. */
const pipeline = (extra = '') => `version: 1
name: reloading
models:
  scripted: { provider: scripted, script: ./reloading.script.yaml }
defaults: { model: scripted }
agents:
  writer: { instructions: Write. }
  thinker: { instructions: Think it over. }
  closer: { instructions: Close up. }${extra ? `\n  polisher: { instructions: Polish. }` : ''}
flow:
  - { id: write, kind: agent, agent: writer }
  - { id: think, kind: agent, agent: thinker, when: "input.path == 'slow'" }
  - id: confirm
    kind: human
    when: "input.path == 'human'"
    prompt: Go on?
    answer: { type: object, properties: { go: { type: boolean } }, required: [go] }
    timeout: 300
  - { id: close, kind: agent, agent: closer }
${extra}`;

/** The script of version `v`: every reply names it, so a task's output says which version ran each step. */
const script = (v: string) => `agents:
  writer:
    - content: written by ${v}
  thinker:
    - { content: thought by ${v}, delayMs: 8000 }
  closer:
    - content: closed by ${v}
  polisher:
    - content: polished by ${v}
`;

/** Saves as editors that write a new file and rename it over the old one do (vim, IDEs, sed -i). */
async function saveByRename(file: string, text: string): Promise<void> {
  const temporary = `${file}.tmp-${process.pid}`;
  await writeFile(temporary, text);
  await rename(temporary, file);
}

/**
 * `troupe up --watch` on a real nats-server: a saved change to a pipeline file, or to the script it names, becomes
 * the version new tasks start on while tasks in flight finish on theirs; a save that does not load keeps the last
 * good version serving and says why; and no task queued meanwhile is lost or run twice.
 */
describe('troupe up --watch', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let dir: string;
  let file: string;
  let scriptFile: string;
  let up: CliProcess;
  const events: TroupeEvent[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    client = await connect({ servers: nats.url, name: 'watch-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => void events.push(...eventsInMessage(msg)),
    });
    await client.flush();
    dir = await mkdtemp(join(tmpdir(), 'troupe-watch-'));
    file = join(dir, 'reloading.yaml');
    scriptFile = join(dir, 'reloading.script.yaml');
    await writeFile(file, pipeline());
    await writeFile(scriptFile, script('v1'));
    up = startTroupe(
      ['up', file, '--watch', '--server', nats.url, '--home', join(dir, 'home'), '--json'],
      cliEnv({ TROUPE_LOG_LEVEL: 'info' }),
    );
    await up.waitFor(/troupe is up/);
    await up.waitFor(/watching .*reloading\.yaml/);
  });
  afterAll(async () => {
    await up?.stop();
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const eventsOf = (taskId: string) => events.filter((e) => e.taskId === taskId);
  const finalOf = (taskId: string) =>
    vi.waitFor(
      () => {
        const final = eventsOf(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind));
        if (!final) throw new Error(`task ${taskId} has not ended yet`);
        return final;
      },
      { timeout: 30_000, interval: 50 },
    );
  const outputOf = async (taskId: string) => {
    const final = await finalOf(taskId);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    return final.kind === 'task.completed' ? final.data.output : undefined;
  };
  const submit = (id: string, path = 'straight') =>
    jetstream(client).publish(
      subjects.task('reloading'),
      JSON.stringify({ id, goal: 'go', input: { path } }),
      {
        msgID: id,
      },
    );
  const versionOf = async (taskId: string) =>
    (await (await new Kvm(client).open(BUCKETS.workflows)).get(taskId))?.json<{ version?: string }>().version;
  /** The JSON log lines `up` wrote whose message matches. */
  const logLines = (pattern: RegExp) =>
    up
      .output()
      .split('\n')
      .flatMap((line) => {
        // The banner is not JSON, and the last line may be half written.
        try {
          return [JSON.parse(line) as { level: number; msg: string; from?: string; to?: string }];
        } catch {
          return [];
        }
      })
      .filter((line) => typeof line.msg === 'string' && pattern.test(line.msg));
  const reloads = () => logLines(/^pipeline reloading reloaded from/);
  const refusals = () => logLines(/not reloaded/);
  const untilReloads = (n: number) =>
    vi.waitFor(
      () => {
        const done = reloads();
        if (done.length < n)
          throw new Error(`${done.length} reloads so far, waiting for ${n}:\n${up.output()}`);
        return done[n - 1];
      },
      { timeout: 15_000, interval: 50 },
    );
  const untilRefusals = (n: number) =>
    vi.waitFor(
      () => {
        const done = refusals();
        if (done.length < n) throw new Error(`${done.length} refusals so far, waiting for ${n}`);
        return done[n - 1];
      },
      { timeout: 15_000, interval: 50 },
    );

  it('starts new tasks on the saved version while tasks in flight, a slow step or a question, finish on theirs', async () => {
    await submit('w-first');
    expect(await outputOf('w-first')).toBe('closed by v1');
    const v1 = await versionOf('w-first');
    await submit('w-slow', 'slow');
    await submit('w-ask', 'human');
    await vi.waitFor(
      () => {
        expect(ofKind(eventsOf('w-slow'), 'step.started').map((e) => e.data.step)).toContain('think');
        expect(ofKind(eventsOf('w-ask'), 'human.asked')).toHaveLength(1);
      },
      { timeout: 15_000, interval: 50 },
    );

    // The script the pipeline names, saved by rename: a new version.
    await saveByRename(scriptFile, script('v2'));
    const reloaded = await untilReloads(1);
    const v2 = reloaded?.to;
    expect(v2).toMatch(/^[0-9a-f]{64}$/);
    expect(reloaded?.from).toBe(v1);
    expect(reloaded?.msg).toMatch(
      new RegExp(`reloaded from .*reloading\\.yaml: version ${v1?.slice(0, 12)} → ${v2?.slice(0, 12)}`),
    );
    // The slow step was still thinking when the new version came in.
    expect(ofKind(eventsOf('w-slow'), 'step.completed').map((e) => e.data.step)).not.toContain('think');

    await submit('w-new');
    expect(await outputOf('w-new')).toBe('closed by v2');
    expect(await versionOf('w-new')).toBe(v2);

    // Both steps of the slow task ran on v1, the one it started on, the second started after the reload.
    expect(await outputOf('w-slow')).toBe('closed by v1');
    const slowSteps = ofKind(eventsOf('w-slow'), 'step.completed');
    expect(slowSteps.find((e) => e.data.step === 'think')?.data.output).toBe('thought by v1');
    expect(await versionOf('w-slow')).toBe(v1);

    // The task waiting on a person goes on, once answered, on v1 too.
    const asked = ofKind(eventsOf('w-ask'), 'human.asked')[0];
    const answered = await troupe(
      ['answer', String(asked?.data.questionId), '{"go": true}', '--server', nats.url],
      cliEnv(),
    );
    expect(answered.code, answered.stderr).toBe(0);
    expect(await outputOf('w-ask')).toBe('closed by v1');
    expect(await versionOf('w-ask')).toBe(v1);
  });

  it('keeps the last good version serving through a save that does not load, and takes the next good one', async () => {
    const serving = (await untilReloads(1))?.to;
    // A step naming an agent that is not there: refused, with the file and line.
    await writeFile(file, pipeline().replace('agent: closer }', 'agent: closr }'));
    const refused = await untilRefusals(1);
    expect(refused?.level).toBe(50);
    expect(refused?.msg).toMatch(
      new RegExp(
        `^pipeline reloading: .*reloading\\.yaml not reloaded, version ${serving?.slice(0, 12)} keeps serving: .*reloading\\.yaml:\\d+:\\d+ flow\\[3\\]\\.agent: .*closr`,
      ),
    );
    await submit('w-during-bad');
    expect(await outputOf('w-during-bad')).toBe('closed by v2');
    expect(await versionOf('w-during-bad')).toBe(serving);

    // A file that now names another pipeline is refused too: a reload keeps a file's pipeline.
    await writeFile(file, pipeline().replace('name: reloading', 'name: renamed'));
    expect((await untilRefusals(2))?.msg).toMatch(/now names pipeline renamed; .*restart to run renamed/);

    // MCP servers are connected when up starts: a save that changes them is refused, saying to restart.
    await writeFile(
      file,
      pipeline().replace(
        'defaults: { model: scripted }',
        'defaults: { model: scripted }\nmcpServers:\n  docs: { transport: http, url: "http://127.0.0.1:9/mcp" }',
      ),
    );
    expect((await untilRefusals(3))?.msg).toMatch(
      /reloading\.yaml mcpServers: the MCP servers changed; they are connected when the process starts, so restart it/,
    );

    // The next good save, by rename, with a new agent and step: its agent is served here from now on.
    await writeFile(scriptFile, script('v3'));
    await saveByRename(file, pipeline('  - { id: polish, kind: agent, agent: polisher }\n'));
    // The script saved alone is refused (the file still changes the MCP servers); the two together make one version.
    const v3 = (await untilReloads(2))?.to;
    expect(up.output()).toMatch(/serving agents polisher of pipeline reloading, new in version/);
    await submit('w-polished');
    expect(await outputOf('w-polished')).toBe('polished by v3');
    expect(await versionOf('w-polished')).toBe(v3);
  });

  it('loses no task queued while the pipeline is reloaded, and runs none twice', async () => {
    const before = reloads().length;
    const ids = Array.from({ length: 30 }, (_, i) => `w-queued-${i}`);
    for (const [i, id] of ids.entries()) {
      await submit(id);
      // Two saves in the middle of the stream of tasks.
      if (i === 10) await saveByRename(scriptFile, script('v4'));
      if (i === 20) {
        await untilReloads(before + 1);
        await writeFile(scriptFile, script('v5'));
      }
    }
    await untilReloads(before + 2);
    const outputs = await Promise.all(ids.map((id) => outputOf(id)));
    for (const output of outputs) expect(output).toMatch(/^polished by v[345]$/);
    // Every task ran each step once: accepted once, closed once.
    for (const id of ids) {
      expect(ofKind(eventsOf(id), 'task.accepted'), id).toHaveLength(1);
      expect(
        ofKind(eventsOf(id), 'step.completed').filter((e) => e.data.step === 'close'),
        id,
      ).toHaveLength(1);
    }
    // The tasks after the last save ran on it.
    await submit('w-last');
    expect(await outputOf('w-last')).toBe('polished by v5');
    // Nothing is left on the consumer. A task's message is acked after its final event goes out, so the last one's ack
    // may follow the output just read.
    const consumer = await jetstream(client).consumers.get('TASKS', 'troupe-tasks-reloading');
    await expect
      .poll(async () => {
        const info = await consumer.info();
        return info.num_pending + info.num_ack_pending;
      })
      .toBe(0);
  });
});

/**
 * Agents on `troupe worker`s: a reload that adds an agent has it served by a worker started before the reload, and
 * a worker runs each step as the version of its task defines the agent.
 */
describe('troupe up --watch --no-agents, with a troupe worker', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let dir: string;
  let up: CliProcess;
  let worker: CliProcess;
  const events: TroupeEvent[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    client = await connect({ servers: nats.url, name: 'watch-worker-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => void events.push(...eventsInMessage(msg)),
    });
    await client.flush();
    dir = await mkdtemp(join(tmpdir(), 'troupe-watch-worker-'));
  });
  afterAll(async () => {
    await worker?.stop();
    await up?.stop();
    await client?.close();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const outputOf = (taskId: string) =>
    vi.waitFor(
      () => {
        const final = events.find((e) => e.taskId === taskId && FINAL_EVENT_KINDS.includes(e.kind));
        if (!final) throw new Error(`task ${taskId} has not ended yet`);
        expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
        return final.kind === 'task.completed' ? final.data.output : undefined;
      },
      { timeout: 30_000, interval: 50 },
    );
  const submit = (id: string) =>
    jetstream(client).publish(
      subjects.task('reloading'),
      JSON.stringify({ id, goal: 'go', input: { path: 'straight' } }),
      { msgID: id },
    );

  it('serves an agent the reload adds, and runs the new version of each agent', async () => {
    const file = join(dir, 'reloading.yaml');
    const scriptFile = join(dir, 'reloading.script.yaml');
    await writeFile(file, pipeline());
    await writeFile(scriptFile, script('v1'));
    const home = join(dir, 'home');
    up = startTroupe(
      ['up', file, '--watch', '--no-agents', '--server', nats.url, '--home', home, '--json'],
      cliEnv({ TROUPE_LOG_LEVEL: 'info' }),
    );
    await up.waitFor(/watching .*reloading\.yaml/);
    worker = startTroupe(
      ['worker', file, '--server', nats.url, '--home', home, '--json'],
      cliEnv({ TROUPE_LOG_LEVEL: 'info' }),
    );
    await worker.waitFor(/agent host started/);
    await submit('ww-first');
    expect(await outputOf('ww-first')).toBe('closed by v1');

    await writeFile(scriptFile, script('v2'));
    await saveByRename(file, pipeline('  - { id: polish, kind: agent, agent: polisher }\n'));
    await up.waitFor(/pipeline reloading reloaded from .*→/);
    await worker.waitFor(/serving agents polisher of pipeline reloading, new in version/);
    await submit('ww-polished');
    expect(await outputOf('ww-polished')).toBe('polished by v2');
    const closed = events.find(
      (e) => e.taskId === 'ww-polished' && e.kind === 'step.completed' && e.data.step === 'close',
    );
    expect(closed?.kind === 'step.completed' ? closed.data.output : undefined).toBe('closed by v2');
  });
});
