import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EvalCase, TroupeEvent } from '@troupe/protocol';
import { z } from 'zod';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import { runTask } from '../../src/inProcessRun.ts';

/** What the test tools did for real: each `stamp` label, and how many `probe` calls run at once (and at most). */
export interface Effects {
  stamps: string[];
  probes: { now: number; most: number; gate: Promise<void> };
}

/** A scripted turn: text, or tool calls with their arguments. */
export type Turn = { content?: string; toolCalls?: { name: string; arguments: object }[] };

const dirs: string[] = [];

/** Removes every directory the pipelines were written to. */
export async function removePipelines(): Promise<void> {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
}

/**
 * A one-step pipeline `evaldemo` whose agent `worker` plays `turns` on the scripted model and may call `stamp` (not
 * rerunnable: it leaves a mark in `effects.stamps`), `probe` (rerunnable: it waits on `effects.probes.gate`, counting
 * the calls waiting), `write_file` and `remember`. `priced` puts a price on the scripted model, so runs cost something;
 * `askToStamp` makes each stamp wait for a person's approval; `rerunnableStamp` marks stamp rerunnable (not read-only).
 */
export async function evalPipeline(
  turns: Turn[],
  effects: Effects,
  options: { priced?: boolean; askToStamp?: boolean; rerunnableStamp?: boolean } = {},
): Promise<LoadedPipeline> {
  const dir = await mkdtemp(join(tmpdir(), 'troupe-evalrun-'));
  dirs.push(dir);
  await writeFile(join(dir, 'script.json'), JSON.stringify({ agents: { worker: turns } }));
  await writeFile(join(dir, 'tools.js'), '// the test gives the exports\n');
  const prices = options.priced ? "prices: { 'scripted:scripted': { input: 1000, output: 1000 } }\n" : '';
  await writeFile(
    join(dir, 'evaldemo.yaml'),
    `version: 1
name: evaldemo
models: { scripted: { provider: scripted, script: ./script.json } }
defaults: { model: scripted }
${prices}tools:
  modules: [./tools.js]
agents:
  worker:
    instructions: Do the work.
    tools: [stamp, probe, write_file, remember]
    permissions:
      - { tool: stamp, decision: ${options.askToStamp ? 'ask' : 'allow'} }
      - { tool: probe, decision: allow }
      - { tool: write_file, decision: allow }
      - { tool: remember, decision: allow }
flow:
  - { id: work, kind: agent, agent: worker }
`,
  );
  const stamp = {
    name: 'stamp',
    description: 'Stamp a label, once: it is not safe to run again',
    input: z.object({ label: z.string() }),
    ...(options.rerunnableStamp ? { rerunnable: true } : {}),
    run: async ({ label }: { label: string }) => {
      effects.stamps.push(label);
      return `stamped ${label}`;
    },
  };
  const probe = {
    name: 'probe',
    description: 'Wait for the test to let go',
    input: z.object({}),
    rerunnable: true,
    readOnly: true,
    run: async () => {
      effects.probes.now += 1;
      effects.probes.most = Math.max(effects.probes.most, effects.probes.now);
      await effects.probes.gate;
      effects.probes.now -= 1;
      return 'probed';
    },
  };
  return loadPipeline(join(dir, 'evaldemo.yaml'), {
    toolNames: builtinTools().names(),
    importModule: async () => ({ stamp, probe }),
  });
}

export const noEffects = (): Effects => ({
  stamps: [],
  probes: { now: 0, most: 0, gate: Promise.resolve() },
});

/** Runs the pipeline's task for real, in this process, and makes a case of it with its run recorded. */
export async function recordedCase(
  pipeline: LoadedPipeline,
  id: string,
  goal: string,
  approvals: 'allow' | 'deny' = 'deny',
): Promise<EvalCase> {
  const root = await mkdtemp(join(tmpdir(), 'troupe-evalrec-'));
  dirs.push(root);
  const events: TroupeEvent[] = [];
  const { final } = await runTask({
    pipeline,
    goal,
    workspaceRoot: root,
    approvals,
    onEvent: (e) => events.push(e),
  });
  return {
    id,
    goal,
    recording: { taskId: final.taskId, pipeline: final.pipeline, events, journal: {}, values: {} },
  };
}
