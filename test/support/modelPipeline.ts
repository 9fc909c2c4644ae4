import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';

/** A pipeline file in a directory of its own, its agents on a model behind a fake OpenAI server. */
export interface ModelPipeline {
  /** The wire-faithful fake the real OpenAI client calls: replies are enqueued, every request is kept. */
  openai: FakeModelServer;
  /** The directory the file is in: a `troupe up` of the test keeps its home under it. */
  dir: string;
  file: string;
  /** The messages the model was sent in request `index`, as JSON text ('[]' when there is no such request). */
  sent(index: number): string;
  stop(): Promise<void>;
}

/**
 * Writes pipeline `name` with its `agents:` and `flow:` (YAML, at the top level), its one model `gpt` served by a new
 * fake OpenAI server.
 */
export async function startModelPipeline(name: string, agentsAndFlow: string): Promise<ModelPipeline> {
  const openai = await startFakeOpenAI();
  const dir = await mkdtemp(join(tmpdir(), `troupe-${name}-`));
  const file = join(dir, `${name}.yaml`);
  await writeFile(
    file,
    `version: 1
name: ${name}
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}" }
defaults: { model: gpt }
${agentsAndFlow}`,
  );
  return {
    openai,
    dir,
    file,
    sent: (index) =>
      JSON.stringify((openai.requests[index]?.body as { messages?: unknown[] } | undefined)?.messages ?? []),
    async stop() {
      await openai.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
