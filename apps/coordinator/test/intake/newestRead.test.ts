import { describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { claim } from '../../src/intake/claim.ts';
import { triage } from '../../src/intake/triage.ts';
import { config, deliveryOf, intakeServices, V1 } from './taskServices.ts';

const V2 = 'b'.repeat(64);
/** Version 2 asks for a ticket in the input; version 1 (the coordinator's) for none. */
const v2 = PipelineConfig.parse({
  ...config,
  input: { type: 'object', properties: { ticket: { type: 'string' } }, required: ['ticket'] },
});

/** A registry whose newest version is `registered` as each read finds it, counting the reads. */
function registry(first: string | undefined) {
  const state = { registered: first, reads: 0 };
  const setup = intakeServices({
    load: async (hash) => (hash === V2 ? v2 : undefined),
    newest: async () => {
      state.reads++;
      return state.registered;
    },
  });
  return { ...setup, state };
}

/** Triage and claim of one delivery, as a runner does them. */
async function triageAndClaim(services: ReturnType<typeof intakeServices>['services'], payload: unknown) {
  const triaged = await triage(services, deliveryOf(payload));
  if (triaged.next !== 'claim') return triaged;
  return claim(services, triaged.task);
}

describe('the version a new task starts on', () => {
  it('is read from the registry once per task, after its delivery: a version registered before the submission is the one it runs', async () => {
    const { services, state } = registry(V1);
    // Version 2 registered (a reload, a deploy) just before the task is submitted: the task runs it.
    state.registered = V2;
    const claimed = await triageAndClaim(services, { id: 'task-1', goal: 'g', input: { ticket: 'T-1' } });
    expect(claimed).toMatchObject({ next: 'run', claimed: { version: V2 }, flow: { hash: V2 } });
    expect(state.reads).toBe(1);
  });

  it('starts a task on the version its input was checked against, even when another is registered before its claim', async () => {
    const { services, state, store } = registry(V1);
    const triaged = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }));
    expect(triaged).toMatchObject({ next: 'claim' });
    if (triaged.next !== 'claim') return;
    // Version 2, whose schema this input does not fit, is registered between triage and the claim.
    state.registered = V2;
    const claimed = await claim(services, triaged.task);
    expect(claimed).toMatchObject({ next: 'run', claimed: { version: V1 }, flow: { hash: V1 } });
    expect((await store.get('task-1'))?.value.version).toBe(V1);
    expect(state.reads).toBe(1);
  });

  it("refuses an input that does not fit the newest version's schema, read once", async () => {
    const { services, state } = registry(V2);
    expect(await triageAndClaim(services, { id: 'task-1', goal: 'g' })).toEqual({ next: 'refuse' });
    expect(state.reads).toBe(1);
  });

  it("starts on the coordinator's own version when the registry names none (no entry, or not readable)", async () => {
    const { services, state } = registry(undefined);
    const claimed = await triageAndClaim(services, { id: 'task-1', goal: 'g' });
    expect(claimed).toMatchObject({ next: 'run', claimed: { version: V1 }, flow: { hash: V1 } });
    expect(state.reads).toBe(1);
  });

  it('reads no registry for a task resuming from its record', async () => {
    const { services, state } = registry(V1);
    expect(await triageAndClaim(services, { id: 'task-1', goal: 'g' })).toMatchObject({ next: 'run' });
    state.registered = V2;
    const again = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { deliveryCount: 2 }));
    if (again.next !== 'claim') throw new Error(`triaged as ${again.next}`);
    expect(await claim(services, again.task)).toMatchObject({ next: 'run', claimed: { version: V1 } });
    expect(state.reads).toBe(1);
  });
});
