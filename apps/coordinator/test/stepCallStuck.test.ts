import type { AgentStepReply } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { pipeline, type Step, setUp, usage } from './support/steeringRunner.ts';

/** What a host of an older release replies to a step whose journal holds a record a newer host wrote. */
const NEWER =
  'agent planner: journal record stuck-1.plan.1.1.model is of kind "model.plan", which this Troupe host does not know: ' +
  'a newer Troupe host wrote it (journal_from_newer_host). Upgrade this host to the release the other hosts of the ' +
  'pipeline run (docs/operations.md, Upgrades); meanwhile the step is sent again, and a host that knows the record ' +
  'goes on from the journal';

const unreadable = (step: Step) =>
  step.respond({
    ok: false,
    stepId: step.value.stepId,
    error: { code: 'journal_unavailable', message: NEWER },
    usage,
    turns: 0,
  } as AgentStepReply);

describe('a step every host sends back journal_unavailable', () => {
  it('is sent again until its timeout, and its failure then says why it was sent again, not only that it timed out', async () => {
    const { intake, next, clock, bus } = await setUp(
      pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]),
    );
    const task = intake.deliver({ id: 'stuck-1', goal: 'plan it' });
    let sends = 0;
    // Only hosts of the older release serve the agent: each send is answered so, and sent again after a backoff.
    while (bus.eventsOf('task.failed').length === 0) {
      unreadable(await next('stuck-1.plan.1'));
      sends += 1;
      await bus.settled();
      // The backoff is at most 2 s; the step's own time (the runner's stepTimeout) is 60 s.
      clock.advance(2_000);
      await bus.settled();
      if (sends > 40) break;
    }
    await task.handled;
    expect(sends).toBeGreaterThan(10);
    const failed = bus.eventsOf('task.failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]?.data.message).toContain('did not finish within the step timeout (60 s)');
    expect(failed[0]?.data.message).toContain('journal_from_newer_host');
    expect(failed[0]?.data.message).toContain('Upgrade this host');
  });
});
