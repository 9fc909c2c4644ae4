import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, replayTask } from '@troupe/coordinator';
import {
  Dataset,
  DatasetSummary,
  type EventOf,
  FINAL_EVENT_KINDS,
  parseMessage,
  subjects,
  TroupeEvent,
} from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';

const PIPELINE = 'longtool';
const TASKS = ['longtool-1', 'longtool-2'];
/** Over the tool output cap (64 KiB): read_file's result is cut in its event and kept whole in the object store. */
const BIG = 'z'.repeat(70_000);

/**
 * `troupe eval dataset`: `troupe up` runs a scripted pipeline whose worker writes a long file and reads it back, and
 * `add --from-runs` makes a dataset of its tasks whose recordings are whole — the events (the final one too), the
 * journal record holding the write's whole arguments, and the read's whole output from the object store — so each
 * replays from the dataset alone, the same as it ran.
 */
describe('troupe eval dataset', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let dir: string;
  let home: string;
  let up: CliProcess;
  let env: NodeJS.ProcessEnv;
  const pipelineFile = () => join(dir, `${PIPELINE}.yaml`);
  const eval_ = (...args: string[]) => troupe(['eval', 'dataset', ...args], env, 60_000);

  beforeAll(async () => {
    nats = await startTestNats();
    client = await connect({ servers: nats.url });
    dir = await mkdtemp(join(tmpdir(), 'troupe-eval-datasets-'));
    home = join(dir, 'home');
    await writeFile(
      join(dir, `${PIPELINE}.script.json`),
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
      pipelineFile(),
      `version: 1
name: ${PIPELINE}
models: { scripted: { provider: scripted, script: ./${PIPELINE}.script.json } }
defaults: { model: scripted }
agents:
  worker: { instructions: Write a long file and read it back., tools: [write_file, read_file] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    env = cliEnv({ NATS_URL: nats.url });
    up = startTroupe(['up', pipelineFile(), '--home', home], env);
    await up.waitFor(/troupe is up on/, 60_000);
    const ended = new Map<string, string>();
    const allEnded = new Promise<void>((resolve) => {
      client.subscribe(subjects.pipelineEvents(PIPELINE), {
        callback: (_error, msg) => {
          const parsed = parseMessage(TroupeEvent, msg.data);
          if (!parsed.ok || !FINAL_EVENT_KINDS.includes(parsed.value.kind)) return;
          ended.set(parsed.value.taskId, parsed.value.kind);
          if (TASKS.every((id) => ended.has(id))) resolve();
        },
      });
    });
    await client.flush();
    for (const id of TASKS)
      client.publish(subjects.task(PIPELINE), JSON.stringify({ id, goal: `write ${id}` }));
    await allEnded;
    expect([...ended.values()]).toEqual(['task.completed', 'task.completed']);
  }, 150_000);

  afterAll(async () => {
    await up?.stop();
    await client?.close();
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('makes a dataset of recorded runs whose recordings are whole, and each replays from it alone', async () => {
    const added = await eval_(
      'add',
      'long-runs',
      '--from-runs',
      '--pipeline',
      PIPELINE,
      '--status',
      'completed',
      '--since',
      '1h',
      '--description',
      'long reads',
    );
    expect(added.stderr).toBe('');
    expect(added.stdout).toBe(
      'stored dataset long-runs version 1: 2 cases (2 recorded); 2 added, 0 replaced\n',
    );
    expect(added.code).toBe(0);

    const shown = await eval_('show', 'long-runs', '--json');
    expect(shown.code).toBe(0);
    const dataset = Dataset.parse(JSON.parse(shown.stdout));
    expect(dataset).toMatchObject({ name: 'long-runs', version: 1, description: 'long reads' });
    // Newest first: the second task was created after the first.
    expect(dataset.cases.map((c) => c.id).sort()).toEqual(TASKS);
    const pipeline = await loadPipeline(pipelineFile(), { toolNames: builtinTools().names() });
    for (const c of dataset.cases) {
      expect(c).toMatchObject({ goal: `write ${c.id}`, expected: 'read it all' });
      const recording = c.recording;
      if (!recording) throw new Error(`case ${c.id} has no recording`);
      expect(recording).toMatchObject({
        taskId: c.id,
        pipeline: PIPELINE,
        version: expect.stringMatching(/^[0-9a-f]{64}$/),
      });
      expect(recording.events.map((e) => e.kind)).toContain('task.completed');
      // The read's result was cut in its event; the whole is in the recording, read from the object store.
      const read = recording.events.find(
        (e): e is EventOf<'tool.result'> => e.kind === 'tool.result' && e.data.tool === 'read_file',
      );
      const ref = read?.data.outputRef;
      if (!ref) throw new Error(`the read of case ${c.id} kept no reference to its whole output`);
      expect(read.data.output.length).toBeLessThan(BIG.length);
      expect(recording.values[`${ref.bucket}/${ref.name}`]).toContain(BIG);
      // The write's arguments were cut in their events; the journal record holding them whole is in the recording.
      expect(Object.keys(recording.journal)).toEqual([`${c.id}.work.1.1.model`]);
      expect(JSON.stringify(recording.journal)).toContain(BIG);

      // Replayed from the dataset alone, the recorded tools answering: the same run, nothing kept in part.
      const replayed = await replayTask(recording.events, c.id, {
        pipeline,
        tools: 'recorded',
        journal: { entry: async (key) => recording.journal[key] },
        values: {
          read: async (at) => {
            const value = recording.values[`${at.bucket}/${at.name}`];
            if (value === undefined) throw new Error(`the recording holds no value ${at.bucket}/${at.name}`);
            return value;
          },
        },
      });
      expect(replayed.truncated).toEqual([]);
      expect(replayed.divergence).toBeUndefined();
      const completed = replayed.events.find(
        (e): e is EventOf<'task.completed'> => e.kind === 'task.completed',
      );
      expect(completed?.data.output).toBe('read it all');
      const replayedRead = replayed.events.find(
        (e): e is EventOf<'tool.result'> => e.kind === 'tool.result' && e.data.tool === 'read_file',
      );
      expect(replayedRead?.data.ok).toBe(true);
    }
  });

  it('adds a version with the cases before and the new ones, a case of the same id replaced; lists and shows versions', async () => {
    const [first] = TASKS as [string];
    const again = await eval_('add', 'long-runs', '--tasks', `${first},gone-task`, '--pipeline', PIPELINE);
    expect(again.stderr).toBe(
      'skipped task gone-task: no events of it are kept on this server (EVENTS let them age out)\n',
    );
    expect(again.stdout).toBe(
      'stored dataset long-runs version 2: 2 cases (2 recorded); 0 added, 1 replaced since version 1, 1 task skipped\n',
    );
    expect(again.code).toBe(0);

    const listed = await eval_('list', '--json');
    expect(listed.code).toBe(0);
    const summaries = listed.stdout
      .trim()
      .split('\n')
      .map((line) => DatasetSummary.parse(JSON.parse(line)));
    expect(summaries.map((s) => [s.name, s.version, s.cases, s.recorded, s.description])).toEqual([
      ['long-runs', 2, 2, 2, 'long reads'],
      ['long-runs', 1, 2, 2, 'long reads'],
    ]);

    const table = await eval_('show', 'long-runs@1');
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(
      /^dataset long-runs version 1, made .+: 2 cases, 2 recorded\nlong reads\nscorers: none/,
    );
    expect(table.stdout).toMatch(new RegExp(`\\n${first}\\s+write ${first}\\s+\\d+ events\\s+-\\n`));

    const missing = await eval_('show', 'long-runs@7');
    expect(missing.stderr).toBe('troupe: dataset long-runs has no version 7; its versions: 1, 2\n');
    expect(missing.code).toBe(1);
  });

  it('adds cases from a file, and says plainly what it could not add', async () => {
    const file = join(dir, 'handmade.yaml');
    await writeFile(
      file,
      'scorers: [{ type: contains, value: read }]\ncases:\n  - { id: hand-1, goal: say hi }\n',
    );
    const added = await eval_('add', 'long-runs', '--file', file);
    expect(added.stdout).toBe(
      'stored dataset long-runs version 3: 3 cases (2 recorded); 1 added, 0 replaced since version 2, 1 scorer added\n',
    );
    const shown = Dataset.parse(JSON.parse((await eval_('show', 'long-runs', '--json')).stdout));
    expect(shown.scorers).toEqual([{ type: 'contains', value: 'read' }]);
    expect(shown.cases.at(-1)).toEqual({ id: 'hand-1', goal: 'say hi' });

    // A file of scorers alone adds them to the cases there are; a dataset of scorers alone is refused.
    const scorersFile = join(dir, 'scorers.yaml');
    await writeFile(scorersFile, 'scorers: [{ type: regex, pattern: "^read" }]\n');
    const scored = await eval_('add', 'long-runs', '--file', scorersFile);
    expect(scored.stdout).toBe(
      'stored dataset long-runs version 4: 3 cases (2 recorded); 0 added, 0 replaced since version 3, 1 scorer added\n',
    );
    // The same again: its scorer is there already, which is what it says.
    const same = await eval_('add', 'long-runs', '--file', scorersFile);
    expect(same.stderr).toBe(
      `troupe: nothing to add to dataset long-runs: ${scorersFile} holds no case, and its scorer is in the dataset already; no version was stored\n`,
    );
    expect(same.code).toBe(2);
    const alone = await eval_('add', 'scorers-only', '--file', scorersFile);
    expect(alone.stderr).toBe(
      'troupe: nothing to add to dataset scorers-only: scorers alone, and it has no cases yet; no version was stored\n',
    );
    expect(alone.code).toBe(2);

    const bad = join(dir, 'bad.jsonl');
    await writeFile(bad, '{"id":"a","goal":"g"}\n{"id":"a","goal":"h"}\n');
    const refused = await eval_('add', 'long-runs', '--file', bad);
    expect(refused.stderr).toBe(
      `troupe: ${bad}: 2 cases have the id "a" (line 1, line 2): ids must be unique\n`,
    );
    expect(refused.code).toBe(2);

    const nothing = await eval_('add', 'long-runs');
    expect(nothing.stderr).toMatch(/^troupe: nothing to add: give --file/);
    expect(nothing.code).toBe(2);

    const noRuns = await eval_('add', 'other', '--from-runs', '--pipeline', 'longtol');
    expect(noRuns.stderr).toMatch(
      /^troupe: nothing to add to dataset other: no task of pipeline longtol is known on this server \(did you mean "longtool"\?\)/,
    );
    expect(noRuns.code).toBe(2);
  });

  it('refuses scorers that cannot be made; a version goes without the scorers and cases named', async () => {
    const [first] = TASKS as [string];
    const bad = join(dir, 'bad-scorers.yaml');
    await writeFile(
      bad,
      'scorers:\n  - { type: regex, pattern: "([" }\n  - { type: module, path: ./nope.ts }\n',
    );
    const refused = await eval_('add', 'fixes', '--tasks', first, '--file', bad);
    expect(refused.stderr).toMatch(
      new RegExp(
        `^troupe: ${escaped(bad)}: 2 problems:\\n {2}line 2: scorer 1 \\(regex /\\(\\[/\\): not a valid regular expression: .+\\n {2}line 3: scorer 2 \\(module \\./nope\\.ts\\): \\./nope\\.ts: no such file \\(looked for ${escaped(join(dir, 'nope.ts'))}, from ${escaped(dir)}; .+\\)\\n$`,
      ),
    );
    expect(refused.code).toBe(2);
    expect((await eval_('show', 'fixes')).code).toBe(1);

    const good = join(dir, 'good.yaml');
    await writeFile(
      good,
      'scorers:\n  - { type: regex, pattern: "^read" }\n  - { type: contains, value: read, name: has-read }\ncases: [{ id: hand-1, goal: say hi }]\n',
    );
    const added = await eval_('add', 'fixes', '--tasks', first, '--file', good);
    expect(added.stdout).toBe(
      'stored dataset fixes version 1: 2 cases (1 recorded); 2 added, 0 replaced, 2 scorers added\n',
    );
    const removed = await eval_('add', 'fixes', '--remove-scorer', 'regex', '--remove-case', 'hand-1');
    expect(removed.stderr).toBe('');
    expect(removed.stdout).toBe(
      'stored dataset fixes version 2: 1 case (1 recorded); 0 added, 0 replaced, 1 removed (hand-1) since version 1, 1 scorer removed (regex)\n',
    );
    const shown = await eval_('show', 'fixes', '--json');
    const fixed = Dataset.parse(JSON.parse(shown.stdout));
    expect(fixed.scorers).toEqual([{ type: 'contains', value: 'read', name: 'has-read' }]);
    expect(fixed.cases.map((c) => c.id)).toEqual([first]);
    const unknown = await eval_('add', 'fixes', '--remove-scorer', 'regex');
    expect(unknown.stderr).toBe(
      'troupe: --remove-scorer: dataset fixes version 2 has no scorer regex; its scorers: has-read\n',
    );
    expect(unknown.code).toBe(2);

    // What show --json prints is a dataset file, its version and time let be.
    const copyFile = join(dir, 'fixes.json');
    await writeFile(copyFile, shown.stdout);
    const copied = await eval_('add', 'fixes-copy', '--file', copyFile);
    expect(copied.stdout).toBe(
      'stored dataset fixes-copy version 1: 1 case (1 recorded); 1 added, 0 replaced, 1 scorer added\n',
    );
    const copy = Dataset.parse(JSON.parse((await eval_('show', 'fixes-copy', '--json')).stdout));
    expect({ scorers: copy.scorers, cases: copy.cases }).toEqual({
      scorers: fixed.scorers,
      cases: fixed.cases,
    });
  });

  it('says when --limit left out tasks that matched', async () => {
    const limited = await eval_('add', 'newest', '--from-runs', '--pipeline', PIPELINE, '--limit', '1');
    expect(limited.stderr).toBe('took the newest 1 of 2 tasks that matched; --limit to take more\n');
    expect(limited.stdout).toBe(
      'stored dataset newest version 1: 1 case (1 recorded); 1 added, 0 replaced\n',
    );
    expect(limited.code).toBe(0);
  });
});

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
