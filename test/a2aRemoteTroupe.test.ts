import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type A2aEnv, ECHO_OUTPUT, startA2aEnv, TOKENS } from './support/a2aServer.ts';
import { troupe } from './support/cli.ts';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/**
 * Two Troupes, each on its own nats-server: the first runs a pipeline whose agent is a pipeline of the second,
 * reached through the second's gateway as an A2A agent (its card, its bearer token).
 */
describe('a remote agent that is another Troupe', () => {
  let remote: A2aEnv;
  let h: Harness;
  let dir: string;

  beforeAll(async () => {
    remote = await startA2aEnv();
    dir = await mkdtemp(join(tmpdir(), 'troupe-a2a-troupe-'));
    const pipeline = (name: string, remotePipeline: string) => `version: 1
name: ${name}
agents:
  poet:
    a2a:
      card: ${remote.gateway.url}/a2a/${remotePipeline}/.well-known/agent-card.json
      auth: \${OTHER_TROUPE_TOKEN}
      pollInterval: 0.1
flow:
  - { id: ask-poet, kind: agent, agent: poet }
`;
    await writeFile(join(dir, 'haiku.yaml'), pipeline('haiku', 'echo'));
    await writeFile(join(dir, 'release.yaml'), pipeline('release', 'confirming'));
    h = await startHarness([join(dir, 'haiku.yaml'), join(dir, 'release.yaml')], {
      env: { OTHER_TROUPE_TOKEN: TOKENS.admin },
    });
  });
  afterAll(async () => {
    await h?.stop();
    await remote?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the other Troupe’s pipeline as a step: its output, as text and structured, is the step’s', async () => {
    publishTask(h, 'haiku', { id: 'poem-1', goal: 'the sea' });
    const final = await h.finalOf('poem-1');
    expect(final.kind).toBe('task.completed');
    const [completed] = ofKind(h.eventsOf('poem-1'), 'step.completed');
    expect(completed?.data).toMatchObject({ agent: 'poet', ok: true });
    expect(JSON.parse(completed?.data.output ?? '')).toEqual(ECHO_OUTPUT);
    // On the other side, one task of pipeline echo ran with this step's goal in its text.
    const accepted = remote.h.events.filter((e) => e.kind === 'task.accepted' && e.pipeline === 'echo');
    expect(accepted).toHaveLength(1);
    expect(JSON.stringify(accepted[0]?.data)).toContain('the sea');
  });

  it('asks a person here what the other Troupe’s human step asks, and sends the answer there', async () => {
    publishTask(h, 'release', { id: 'release-1', goal: 'ship 1.2' });
    const asked = await vi.waitFor(
      () => {
        const question = ofKind(h.eventsOf('release-1'), 'human.asked')[0];
        if (!question) throw new Error('no question yet');
        return question;
      },
      { timeout: 30_000, interval: 50 },
    );
    expect(asked.data.question).toContain('Ship the draft?');
    const answered = await troupe([
      'answer',
      asked.data.questionId,
      '{"ship": true}',
      '--server',
      h.nats.url,
    ]);
    expect(answered.code, answered.stderr).toBe(0);
    const final = await h.finalOf('release-1');
    expect(final.kind).toBe('task.completed');
    // The other Troupe's task went through its human step with that answer, and on to ship.
    const remoteTask = remote.h.events.find((e) => e.kind === 'task.accepted' && e.pipeline === 'confirming');
    const remoteEvents = remote.h.eventsOf(remoteTask?.taskId ?? '');
    expect(ofKind(remoteEvents, 'human.answered')[0]?.data.answer).toContain('"ship": true');
    expect(ofKind(remoteEvents, 'step.completed').map((e) => e.data.step)).toContain('ship');
  });
});
