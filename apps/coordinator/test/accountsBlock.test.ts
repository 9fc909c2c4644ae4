import { describe, expect, it } from 'vitest';
import {
  accountsBlock,
  type ConfiguredUser,
  permissionsOf,
  type Role,
  subjectsOverlap,
} from '../src/nats/roles.ts';

const ROLES: Role[] = [
  { kind: 'coordinator', name: 'core' },
  { kind: 'worker', name: 'planner', pipeline: 'demo', agents: ['planner'] },
  { kind: 'submitter', name: 'ci', pipelines: ['demo'] },
  { kind: 'observer', name: 'watcher', pipelines: ['demo'] },
  { kind: 'approver', name: 'ana', pipelines: ['demo'] },
  { kind: 'gateway', name: 'front' },
];
const users: ConfiguredUser[] = ROLES.map((role, i) => ({ role, nkey: `U${String(i).padStart(55, 'A')}` }));

describe('subjectsOverlap', () => {
  it('tells patterns that share a subject from those that cannot', () => {
    expect(subjectsOverlap('troupe.events.>', 'troupe.events._invalid')).toBe(true);
    expect(subjectsOverlap('troupe.events.*.>', 'troupe.events._invalid')).toBe(false);
    expect(subjectsOverlap('troupe.events.demo.>', 'troupe.events.demo.*.task.>')).toBe(true);
    expect(subjectsOverlap('troupe.events.demo.*.llm.>', 'troupe.events.demo.*.task.>')).toBe(false);
    expect(subjectsOverlap('troupe.agents.*.*.summarize', 'troupe.agents.demo.planner.summarize')).toBe(true);
    expect(subjectsOverlap('troupe.tasks.demo', 'troupe.tasks.demo.x')).toBe(false);
  });
});

describe('the accounts block', () => {
  it('gives no role an account that hears what it may send, which nats-server would echo back to TROUPE', () => {
    // A worker that imported all of its pipeline's events heard every task ending once more per worker.
    for (const { role } of users.filter((u) => u.role.kind !== 'coordinator')) {
      const { publish, subscribe } = permissionsOf(role, { coordinators: ['core'], pipelines: ['demo'] });
      for (const heard of subscribe.allow.map((s) => s.split(' ')[0] as string)) {
        expect(
          publish.allow.filter((sent) => subjectsOverlap(sent, heard)),
          `${role.name} ${heard}`,
        ).toEqual([]);
      }
    }
    const block = accountsBlock(users, 1, ['demo']);
    expect(block).toMatch(/^accounts \{\n {2}"TROUPE" \{\n {4}jetstream: enabled/);
    // A worker sends its agents' events by kind, no task's among them.
    expect(block).toContain('{ service: { account: "TROUPE", subject: "troupe.events.demo.*.llm.>" } }');
    expect(block).not.toContain('{ service: { account: "TROUPE", subject: "troupe.events.demo.>" } }');
    expect(block).not.toContain('{ service: { account: "TROUPE", subject: "troupe.events.demo.*.task.>" } }');
  });
});
