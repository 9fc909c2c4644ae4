import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineTool } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { fixturePath, type Harness, ofKind, publishTask, repoRoot, startHarness } from './support/harness.ts';

/** The coordinator only needs to know the tool's name; the worker process runs it. */
const spinName = defineTool({
  name: 'spin',
  description: 'Keep this thread busy for some milliseconds',
  input: z.object({ ms: z.number() }),
  run: async () => 'not here',
});

describe('heartbeats of a step whose own work keeps its thread busy', () => {
  let h: Harness;
  let worker: ChildProcess | undefined;
  let workspaces: string;
  const lines: string[] = [];

  beforeAll(async () => {
    h = await startHarness([fixturePath('busy.yaml')], {
      hostAgents: false,
      stepHeartbeatMs: 300,
      tools: [spinName],
      logLines: lines,
    });
    workspaces = await mkdtemp(join(tmpdir(), 'troupe-busy-'));
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', fixturePath('busyWorker.ts'), h.nats.url, fixturePath('busy.yaml'), workspaces],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    worker = child;
    await new Promise<void>((resolve, reject) => {
      child.stdout?.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('serving')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`the busy worker exited with ${code}`)));
    });
  });
  afterAll(async () => {
    if (worker && worker.exitCode === null) {
      const exited = new Promise((resolve) => worker?.on('exit', resolve));
      worker.kill('SIGTERM');
      await exited;
    }
    await h?.stop();
    await rm(workspaces, { recursive: true, force: true });
  });

  it('keeps them coming from another thread: the step is not taken for dead, nor its call for in doubt', async () => {
    publishTask(h, 'busy', { id: 'busy-1', goal: 'spin' });
    const final = await h.finalOf('busy-1');
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    // Busy for 3 s with heartbeats due every 0.3 s (silent after 0.9 s): without a heartbeat thread the
    // workflow would call the worker silent and send the step again.
    expect(lines.filter((l) => l.includes('went silent'))).toEqual([]);
    const results = ofKind(h.eventsOf('busy-1'), 'tool.result');
    expect(results.map((r) => [r.data.ok, r.data.output])).toEqual([[true, 'spun 3000 ms']]);
  });
});
