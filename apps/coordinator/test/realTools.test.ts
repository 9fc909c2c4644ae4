import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ToolRegistry } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { builtinTools } from '../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../src/config/loadPipeline.ts';
import { MEMORY_TOOLS, realTools } from '../src/replay/realTools.ts';

let dir: string;
let pipeline: LoadedPipeline;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-real-tools-'));
  await writeFile(join(dir, 'tools.js'), '// the test gives the exports\n');
  await writeFile(join(dir, 'script.json'), JSON.stringify({ agents: { worker: [{ content: 'done' }] } }));
  await writeFile(
    join(dir, 'real.yaml'),
    `version: 1
name: real
models: { scripted: { provider: scripted, script: ./script.json } }
defaults: { model: scripted }
tools:
  modules: [./tools.js]
agents:
  worker: { instructions: Work., tools: [stamp, write_file, remember] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
  );
  const stamp = { name: 'stamp', description: 'Stamp', input: z.object({}), run: async () => 'stamped' };
  pipeline = await loadPipeline(join(dir, 'real.yaml'), {
    toolNames: builtinTools().names(),
    importModule: async () => ({ stamp }),
  });
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('the tools a run off the record may run for real', () => {
  it("are the built-ins but memory's, and the pipeline's modules", async () => {
    const real = await realTools(pipeline);
    await real.close();
    const builtins = builtinTools().names();
    expect([...MEMORY_TOOLS].sort()).toEqual(['recall', 'remember']);
    expect(real.registry.names().sort()).toEqual(
      [...builtins.filter((name) => !MEMORY_TOOLS.has(name)), 'stamp'].sort(),
    );
  });

  it("are added to a registry given, beside what it holds (a replay's memory answered from the record)", async () => {
    const into = new ToolRegistry();
    const recorded = {
      name: 'recall',
      description: 'as recorded',
      input: z.object({}),
      run: async () => 'x',
    };
    into.register(recorded);
    const real = await realTools(pipeline, { into });
    expect(real.registry).toBe(into);
    expect(into.get('recall')).toBe(recorded);
    expect(into.get('stamp')?.description).toBe('Stamp');
    await real.close();
  });
});
