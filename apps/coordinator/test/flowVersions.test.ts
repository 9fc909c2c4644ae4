import { join } from 'node:path';
import { createLogger } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { builtinTools } from '../src/config/builtinTools.ts';
import { loadPipeline } from '../src/config/loadPipeline.ts';
import type { PipelineConfig } from '../src/config/pipelineSchema.ts';
import type { WorkflowMachine } from '../src/workflow/compileFlow.ts';
import { FlowVersions } from '../src/workflow/flowVersions.ts';

const examples = join(import.meta.dirname, '..', '..', '..', 'examples');

describe('the version a new task starts on', () => {
  it('falls back to the version a reload made newest, not the started one, when the registry cannot be read', async () => {
    const { config } = await loadPipeline(join(examples, 'demo.yaml'), { toolNames: builtinTools().names() });
    const saved: PipelineConfig = { ...config, description: 'saved again' };
    let registry: string | undefined = 'saved';
    const versions = new FlowVersions({
      pipeline: config.name,
      config,
      hash: 'started',
      compile: () => ({}) as WorkflowMachine,
      source: {
        load: async (hash) => (hash === 'saved' ? saved : undefined),
        newest: async () => registry,
      },
      logger: createLogger({ level: 'silent' }),
    });
    expect((await versions.newest()).hash).toBe('saved');
    expect(await versions.adopt('saved')).toBeUndefined();

    // The registry goes unreadable (an outage): a restart with the saved file would start tasks on it, and so does this.
    registry = undefined;
    expect((await versions.newest()).config.description).toBe('saved again');
    expect(await versions.newestHash()).toBe('saved');
    // A task from before versions were kept still runs on what this coordinator started with.
    expect(await versions.flowFor(undefined)).toMatchObject({ hash: 'started' });
  });

  it('keeps its fallback when the version to adopt cannot be had', async () => {
    const { config } = await loadPipeline(join(examples, 'demo.yaml'), { toolNames: builtinTools().names() });
    const versions = new FlowVersions({
      pipeline: config.name,
      config,
      hash: 'started',
      compile: () => ({}) as WorkflowMachine,
      source: { load: async () => undefined, newest: async () => undefined },
      logger: createLogger({ level: 'silent' }),
    });
    expect(await versions.adopt('gone')).toBe('version gone of pipeline demo is not stored');
    expect((await versions.newest()).hash).toBe('started');
  });
});
