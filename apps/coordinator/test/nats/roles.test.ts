import { describe, expect, it } from 'vitest';
import { permissionsOf, type Role } from '../../src/nats/roles.ts';

const submitter: Role = { kind: 'submitter', name: 'ci', pipelines: ['demo'] };

/**
 * Whether nats-server lets the role's user publish on `subject`, whose tokens are taken as they are written: a
 * consumer's filter in a JetStream API subject (`troupe.events.>`) is matched by a permission's wildcards, but is no
 * wildcard itself.
 */
const mayPublish = (role: Role, subject: string, replicas = 1) =>
  permissionsOf(role, { coordinators: ['core'], replicas }).publish.allow.some((allowed) =>
    covers(allowed, subject),
  );

function covers(pattern: string, subject: string): boolean {
  const want = pattern.split('.');
  const got = subject.split('.');
  for (let i = 0; i < want.length; i += 1) {
    if (want[i] === '>') return got.length > i;
    if (got[i] === undefined || (want[i] !== '*' && want[i] !== got[i])) return false;
  }
  return want.length === got.length;
}

describe("a submitter's rights to restart and fork its pipelines' tasks", () => {
  it("reads its pipelines' stored events through a consumer filtered to them, and no other pipeline's", () => {
    // What `troupe restart` and `troupe fork` read of the origin (readTaskEvents: an ordered consumer of EVENTS).
    for (const subject of [
      '$JS.API.STREAM.INFO.EVENTS',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.demo.t-1.>',
      '$JS.API.CONSUMER.MSG.NEXT.EVENTS.c1',
      '$JS.API.CONSUMER.INFO.EVENTS.c1',
      '$JS.API.CONSUMER.DELETE.EVENTS.c1',
    ]) {
      expect(mayPublish(submitter, subject), subject).toBe(true);
    }
    for (const subject of [
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.gated.t-1.>',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.*.t-1.>',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.>',
      // Reports of invalid messages, which any user may publish, are not events of its pipeline.
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events._invalid',
      // A consumer created without a filter in its subject (the form before nats-server 2.9) reads every event.
      '$JS.API.CONSUMER.CREATE.EVENTS',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1',
      '$JS.API.CONSUMER.DURABLE.CREATE.EVENTS.c1',
      // Never a consumer on a bucket, where what it wrote could be delivered anywhere.
      '$JS.API.CONSUMER.CREATE.KV_workflows.c1.$KV.workflows.>',
      '$JS.API.CONSUMER.CREATE.TASKS.c1.troupe.tasks.demo',
    ]) {
      expect(mayPublish(submitter, subject), subject).toBe(false);
    }
  });

  it("reads its pipelines' stored versions (a restart's input is checked against its origin's), and no other's", () => {
    expect(mayPublish(submitter, '$JS.API.DIRECT.GET.KV_versions.$KV.versions.demo.abc')).toBe(true);
    expect(mayPublish(submitter, '$JS.API.DIRECT.GET.KV_versions.$KV.versions.gated.abc')).toBe(false);
    expect(mayPublish(submitter, '$KV.versions.demo.abc')).toBe(false);
    // Read from the leader, by a request whose key the server cannot see, only when kept on several servers.
    expect(mayPublish(submitter, '$JS.API.STREAM.MSG.GET.KV_versions')).toBe(false);
    expect(mayPublish(submitter, '$JS.API.STREAM.MSG.GET.KV_versions', 3)).toBe(true);
  });

  it('leaves restart and fork to the submitter: an approver and an observer may not submit the new task', () => {
    const approver: Role = { kind: 'approver', name: 'ana', pipelines: ['demo'] };
    const observer: Role = { kind: 'observer', name: 'watcher', pipelines: ['demo'] };
    expect(mayPublish(submitter, 'troupe.tasks.demo')).toBe(true);
    for (const role of [approver, observer])
      expect(mayPublish(role, 'troupe.tasks.demo'), role.kind).toBe(false);
    // Nor may the approver read the stored events a restart or fork is made from.
    expect(mayPublish(approver, '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.demo.t-1.>')).toBe(false);
  });
});

describe("the evals' object store (troupe-evals)", () => {
  const evaluator: Role = { kind: 'evaluator', name: 'evals', pipelines: ['demo'] };
  const observer: Role = { kind: 'observer', name: 'watcher', pipelines: ['demo'] };
  const gateway: Role = { kind: 'gateway', name: 'front' };
  const read = ['$JS.API.STREAM.INFO.OBJ_troupe-evals', '$JS.API.STREAM.MSG.GET.OBJ_troupe-evals'];
  // An object's chunks and description (its name in base64), and the purge of the chunks of one written again.
  const write = [
    '$O.troupe-evals.C.Nm9uOJkbeTdnTa6hM8ygL4',
    '$O.troupe-evals.M.ZGF0YXNldHMvbm90ZXMvMQ==',
    '$JS.API.STREAM.PURGE.OBJ_troupe-evals',
  ];
  // Making, changing or removing the bucket, and any consumer on it, are the coordinator's alone.
  const never = [
    '$JS.API.STREAM.CREATE.OBJ_troupe-evals',
    '$JS.API.STREAM.UPDATE.OBJ_troupe-evals',
    '$JS.API.STREAM.DELETE.OBJ_troupe-evals',
    '$JS.API.CONSUMER.CREATE.OBJ_troupe-evals.c1.$O.troupe-evals.M.>',
    '$JS.API.CONSUMER.DURABLE.CREATE.OBJ_troupe-evals.c1',
  ];

  it("lets an evaluator read its pipelines' recorded runs as eval dataset add --from-runs reads them, and no other's", () => {
    for (const subject of [
      '$JS.API.STREAM.INFO.KV_workflows',
      '$JS.API.DIRECT.GET.KV_workflows.$KV.workflows.t-1',
      '$JS.API.STREAM.INFO.EVENTS',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.demo.t-1.>',
      '$JS.API.CONSUMER.MSG.NEXT.EVENTS.c1',
      '$JS.API.CONSUMER.DELETE.EVENTS.c1',
      '$JS.API.STREAM.INFO.KV_journal',
      '$JS.API.DIRECT.GET.KV_journal.$KV.journal.demo.t-1.review.1.model',
      '$JS.API.STREAM.MSG.GET.OBJ_troupe-values-demo',
      '$JS.API.STREAM.MSG.GET.OBJ_troupe-inputs-demo',
    ]) {
      expect(mayPublish(evaluator, subject), subject).toBe(true);
    }
    for (const subject of [
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.gated.t-1.>',
      '$JS.API.CONSUMER.CREATE.EVENTS.c1.troupe.events.>',
      '$JS.API.DIRECT.GET.KV_journal.$KV.journal.gated.t-1.review.1.model',
      '$JS.API.STREAM.MSG.GET.OBJ_troupe-values-gated',
      // It reads runs; it neither writes what steps keep nor runs a task on the deployment.
      '$KV.journal.demo.t-1.review.1.model',
      '$KV.workflows.t-1',
      '$O.troupe-values-demo.C.x',
      '$JS.API.STREAM.PURGE.OBJ_troupe-values-demo',
      'troupe.tasks.demo',
      'troupe.events.demo.t-1.eval.scored',
      '$JS.API.CONSUMER.CREATE.KV_journal.c1.$KV.journal.demo.>',
    ]) {
      expect(mayPublish(evaluator, subject), subject).toBe(false);
    }
    // The journal kept on several servers too is read by key (a direct get any replica answers), never by a message
    // get from its leader, whose key is in the body, out of the permissions' sight.
    for (const replicas of [1, 3]) {
      expect(mayPublish(evaluator, '$JS.API.STREAM.MSG.GET.KV_journal', replicas)).toBe(false);
      expect(
        mayPublish(evaluator, '$JS.API.DIRECT.GET.KV_journal.$KV.journal.demo.t-1.review.1.model', replicas),
      ).toBe(true);
      expect(
        mayPublish(evaluator, '$JS.API.DIRECT.GET.KV_journal.$KV.journal.gated.t-1.review.1.model', replicas),
      ).toBe(false);
    }
  });

  it('lets an evaluator and the gateway store datasets and experiments, and never make or watch the bucket', () => {
    for (const role of [evaluator, gateway]) {
      for (const subject of [...read, ...write])
        expect(mayPublish(role, subject), `${role.kind} ${subject}`).toBe(true);
      for (const subject of never) expect(mayPublish(role, subject), `${role.kind} ${subject}`).toBe(false);
    }
    // The gateway adds runs of any pipeline (its tokens scope callers): it reads every pipeline's journal.
    expect(mayPublish(gateway, '$JS.API.DIRECT.GET.KV_journal.$KV.journal.gated.t-1.review.1.model')).toBe(
      true,
    );
    expect(mayPublish(gateway, '$KV.journal.gated.t-1.review.1.model')).toBe(false);
  });

  it('gives an observer, a submitter, an approver and a worker nothing of it', () => {
    // An observer is limited to its pipelines, and a dataset may hold any pipeline's recorded runs whole.
    const others: Role[] = [
      observer,
      submitter,
      { kind: 'approver', name: 'ana', pipelines: ['demo'] },
      { kind: 'worker', name: 'executor', pipeline: 'demo', agents: ['executor'] },
    ];
    for (const role of others) {
      for (const subject of [...read, ...write, ...never]) {
        // A worker looks up every stream's info (as a client checks them before use), and reads nothing by it.
        if (role.kind === 'worker' && subject === read[0]) continue;
        expect(mayPublish(role, subject), `${role.kind} ${subject}`).toBe(false);
      }
    }
  });
});
