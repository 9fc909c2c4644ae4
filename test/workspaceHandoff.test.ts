import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AgentService, builtinTools, loadPipeline, startAgentService } from '@troupe/coordinator';
import { createLogger, defineTool, jetstreamManagerOf, NatsBus } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { found, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/** The first call waits until its step is stopped (host C stopping); a call after that returns at once. */
let pauses = 0;
const pause = defineTool({
  name: 'pause',
  rerunnable: true,
  description: 'Waits.',
  input: z.object({}),
  async run(_input, ctx) {
    pauses += 1;
    if (pauses > 1) return 'went on';
    await new Promise((_resolve, reject) =>
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }),
    );
    return 'stopped';
  },
});

/** Lines of text that are not one byte repeated, so a chunk out of place would show. */
const numbered = (tag: string, lines: number): string =>
  Array.from({ length: lines }, (_, i) => `${tag}${String(i + 1).padStart(14, '0')}\n`).join('');
const sha256 = (bytes: string | Buffer) => createHash('sha256').update(bytes).digest('hex');

const BIG_LINES = 200_000; // 16 bytes a line: 3.2 MB

/** Writes the big file (a script holding it would be too large to store as a pipeline version). */
const makeData = defineTool({
  name: 'make_data',
  description: 'Writes data/big.txt.',
  input: z.object({}),
  async run(_input, ctx) {
    await mkdir(join(ctx.workspace, 'data'), { recursive: true });
    await writeFile(join(ctx.workspace, 'data', 'big.txt'), numbered('B', BIG_LINES));
    return 'wrote data/big.txt';
  },
});

/**
 * Issue 27, item 4: files handed between steps. Each agent runs on a host of its own, each with its own workspace
 * root, as `troupe worker`s on different machines: the executor writes a 3.2 MB file and a small one on host A, the
 * reviewer on host B reads them (its tool results show their content), and the finisher, stopped on host C after it
 * wrote a file, is resumed on host D, which sees the file its journal says was written, and the executor's.
 */
describe('workspace files between hosts', () => {
  const big = numbered('B', BIG_LINES);
  let h: Harness;
  let dir: string;
  const hosts = new Map<string, { service: AgentService; bus: NatsBus; root: string }>();

  const startHost = async (name: string, agent: string) => {
    const root = await mkdtemp(join(tmpdir(), `troupe-host-${name}-`));
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    const bus = await NatsBus.connect({ servers: h.nats.url, name: `host-${name}`, logger });
    const registry = builtinTools();
    registry.register(makeData);
    registry.register(pause);
    const pipeline = await loadPipeline(join(dir, 'handoff.yaml'), { toolNames: registry.names() });
    const service = await startAgentService({
      bus,
      pipelines: [pipeline],
      logger,
      workspaceRoot: root,
      only: [agent],
      registry,
    });
    hosts.set(name, { service, bus, root });
    return root;
  };
  const stopHost = async (name: string) => {
    const host = hosts.get(name);
    if (!host) return;
    hosts.delete(name);
    await host.service.stop();
    await host.bus.close();
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-handoff-'));
    await writeFile(
      join(dir, 'handoff.yaml'),
      `version: 1
name: handoff
models:
  scripted: { provider: scripted, script: ./handoff.script.yaml }
defaults: { model: scripted }
workspace: { handOff: true }
agents:
  executor: { instructions: Do it., tools: [make_data, write_file] }
  reviewer: { instructions: Check it., tools: [read_file, list_files] }
  finisher: { instructions: Finish it., tools: [write_file, read_file, pause] }
flow:
  - { id: execute, kind: agent, agent: executor }
  - { id: check, kind: agent, agent: reviewer }
  - { id: finish, kind: agent, agent: finisher }
`,
    );
    await writeFile(
      join(dir, 'handoff.script.yaml'),
      JSON.stringify({
        agents: {
          executor: [
            {
              toolCalls: [
                { name: 'make_data', arguments: {} },
                { name: 'write_file', arguments: { path: 'notes.md', content: 'the plan, from host A' } },
              ],
            },
            { content: 'Wrote data/big.txt and notes.md.' },
          ],
          reviewer: [
            {
              toolCalls: [
                { name: 'read_file', arguments: { path: 'notes.md' } },
                { name: 'read_file', arguments: { path: 'data/big.txt', offset: BIG_LINES, limit: 1 } },
                { name: 'list_files', arguments: { path: '.', recursive: true } },
              ],
            },
            { content: 'Looks right.' },
          ],
          finisher: [
            {
              toolCalls: [
                { name: 'write_file', arguments: { path: 'summary.md', content: 'finished on C' } },
              ],
            },
            // Host C stops in the middle of this call.
            { toolCalls: [{ name: 'pause', arguments: {} }] },
            { toolCalls: [{ name: 'read_file', arguments: { path: 'summary.md' } }] },
            { content: 'Done.' },
          ],
        },
      }),
    );
    h = await startHarness([join(dir, 'handoff.yaml')], {
      hostAgents: false,
      stepHeartbeatMs: 500,
      tools: [makeData, pause],
    });
  });
  afterAll(async () => {
    for (const name of [...hosts.keys()]) await stopHost(name);
    await h?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("a reviewer on another host reads the executor's files whole, and a step resumed elsewhere sees what it wrote", async () => {
    const rootA = await startHost('a', 'executor');
    const rootB = await startHost('b', 'reviewer');
    await startHost('c', 'finisher');
    publishTask(h, 'handoff', { id: 'handoff-1', goal: 'write, check, finish' });

    // The finisher wrote summary.md on host C and waits on its model: C stops, and D takes the step over.
    await found(
      () => (pauses === 1 ? true : undefined),
      'the finisher, having written summary.md on host C, pauses there',
      60_000,
    );
    await stopHost('c');
    const rootD = await startHost('d', 'finisher');
    const final = await h.finalOf('handoff-1', 90_000);
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');

    // Each fact once, however often a resumed step said it again.
    const results = [
      ...new Map(ofKind(h.eventsOf('handoff-1'), 'tool.result').map((e) => [e.id, e])).values(),
    ];
    const reviewer = results.filter((e) => e.data.agent === 'reviewer');
    expect(reviewer.map((e) => [e.data.tool, e.data.ok])).toEqual([
      ['read_file', true],
      ['read_file', true],
      ['list_files', true],
    ]);
    expect(reviewer[0]?.data.output).toBe('the plan, from host A');
    // The last line of the 3.2 MB file: it arrived to its end.
    expect(reviewer[1]?.data.output).toBe(`B${String(BIG_LINES).padStart(14, '0')}`);
    expect(reviewer[2]?.data.output).toBe('data/\ndata/big.txt\nnotes.md');
    // Host B's disk holds the file whole, byte for byte.
    const onB = await readFile(join(rootB, 'handoff', 'handoff-1', 'data', 'big.txt'));
    expect(onB.length).toBe(Buffer.byteLength(big));
    expect(sha256(onB)).toBe(sha256(big));
    expect(sha256(await readFile(join(rootA, 'handoff', 'handoff-1', 'data', 'big.txt')))).toBe(sha256(big));

    // Host D never ran write_file (the journal had its result), yet summary.md is there, as is the executor's file.
    const finisher = results.filter((e) => e.data.agent === 'finisher');
    expect(finisher.map((e) => e.data.tool)).toEqual(['write_file', 'pause', 'read_file']);
    expect(pauses).toBe(2);
    expect(finisher[2]?.data.output).toBe('finished on C');
    expect(await readFile(join(rootD, 'handoff', 'handoff-1', 'summary.md'), 'utf8')).toBe('finished on C');
    expect(sha256(await readFile(join(rootD, 'handoff', 'handoff-1', 'data', 'big.txt')))).toBe(sha256(big));
  });
});

describe('a pipeline that does not hand its workspace on', () => {
  let h: Harness;
  let dir: string;
  /** Writes more files than a hand-off may carry, as an `npm install` or a build would. */
  const scatter = defineTool({
    name: 'scatter',
    description: 'Writes many files.',
    input: z.object({}),
    async run(_input, ctx) {
      await mkdir(join(ctx.workspace, 'out'), { recursive: true });
      for (let i = 0; i < 2_100; i++) await writeFile(join(ctx.workspace, 'out', `f${i}.txt`), `file ${i}`);
      return 'wrote 2100 files';
    },
  });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-nohandoff-'));
    await writeFile(
      join(dir, 'local.yaml'),
      `version: 1
name: local
models:
  scripted: { provider: scripted, script: ./local.script.yaml }
defaults: { model: scripted }
agents:
  builder: { instructions: Build it., tools: [scatter] }
  reader: { instructions: Read it., tools: [read_file] }
flow:
  - { id: build, kind: agent, agent: builder }
  - { id: read, kind: agent, agent: reader }
`,
    );
    await writeFile(
      join(dir, 'local.script.yaml'),
      `agents:
  builder:
    - toolCalls: [{ name: scatter, arguments: {} }]
    - content: built
  reader:
    - toolCalls: [{ name: read_file, arguments: { path: out/f2099.txt } }]
    - content: read
`,
    );
    h = await startHarness([join(dir, 'local.yaml')], { tools: [scatter] });
  }, 60_000);
  afterAll(async () => {
    await h?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('leaves the files on the one host’s disk: a step past the hand-off limits completes, and nothing is stored', async () => {
    publishTask(h, 'local', { id: 'local-1', goal: 'build many files' });
    const final = await h.finalOf('local-1', 60_000);
    expect(final.kind).toBe('task.completed');
    const read = ofKind(h.eventsOf('local-1'), 'tool.result').find((e) => e.data.tool === 'read_file');
    expect(read?.data.output).toContain('file 2099');
    // No step carried a manifest: no workspace object was stored.
    const jsm = await jetstreamManagerOf(h.bus);
    const stored = await jsm.streams.info('OBJ_troupe-values-local').then(
      (info) => info.state.messages,
      () => 0,
    );
    expect(stored).toBe(0);
  });
});
