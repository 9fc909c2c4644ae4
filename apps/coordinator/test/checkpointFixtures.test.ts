import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { WorkflowEmitted, WorkflowOutput } from '../src/workflow/workflowTypes.ts';
import { everyKind, everyKindOptions, everyKindScript } from './support/everyKind.ts';
import { run } from './support/runFlow.ts';

/**
 * Checkpoints stored by the flow compiler as it was before it was split by step kind (one file of 1,834 lines),
 * taken by fixtures/checkpoints/generate.ts from a run of a pipeline with every step kind: each must restore on
 * this compiler and run to the same end, saying what a run restored from it said on the previous compiler (what the original run said
 * after it, and nothing it had said).
 */
const stored = JSON.parse(
  readFileSync(new URL('./fixtures/checkpoints/everyKind.json', import.meta.url), 'utf8'),
) as {
  output: WorkflowOutput;
  events: WorkflowEmitted[];
  checkpoints: { at: string; emitted: number; snapshot: unknown; resumed: WorkflowEmitted[] }[];
};

/** Events as a sorted list of JSON, since steps running at once may say theirs in either order. */
const sorted = (events: readonly WorkflowEmitted[]) => events.map((e) => JSON.stringify(e)).sort();

describe('checkpoints stored by the previous compiler', () => {
  it('cover every kind of waiting state', () => {
    const places = new Set(stored.checkpoints.map((c) => c.at));
    for (const at of ['plan', 'retry:build', 'left+ask', 'each', 'sub', 'choose', 'check', 'close'])
      expect(places).toContain(at);
  });

  it.each(stored.checkpoints.map((c, index) => [index, c.at, c] as const))(
    'restores checkpoint %i (at %s) and runs to the same end',
    async (_index, _at, checkpoint) => {
      const resumed = await run(everyKind, everyKindScript, {
        ...everyKindOptions,
        snapshot: checkpoint.snapshot,
      });
      // `askedPeople` came after these were stored: their steps' replies never say, so a resumed run counts them asked.
      expect({ ...resumed.output, askedPeople: undefined }).toEqual(stored.output);
      expect(resumed.output.askedPeople).toBe(true);
      // What the previous compiler said after restoring it: what the original run said after it, but for an item's
      // first events, which its workflow had passed up and the task's had not yet said when the checkpoint was taken.
      expect(sorted(resumed.events)).toEqual(sorted(checkpoint.resumed));
      const tail = sorted(stored.events.slice(checkpoint.emitted));
      for (const event of sorted(resumed.events)) expect(tail).toContain(event);
    },
  );
});
