/**
 * Random and malformed messages for every subject Troupe listens to, from a seeded `random`: bytes that are not
 * UTF-8, not JSON, JSON of every shape, too deep, too large, almost right.
 */
export function messageStorm(random: () => number) {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const text = (max: number) =>
    Array.from({ length: Math.floor(random() * max) }, () =>
      String.fromCharCode(32 + Math.floor(random() * 95)),
    ).join('');
  const nestedJson = (levels: number) => `${'['.repeat(levels)}1${']'.repeat(levels)}`;
  /** Anything: bytes that are not UTF-8, not JSON, JSON of every shape, too deep, too large, almost right. */
  const payloads: (() => string | Uint8Array)[] = [
    () => Uint8Array.from({ length: 1 + Math.floor(random() * 64) }, () => Math.floor(random() * 256)),
    () => text(200),
    () => '',
    () => 'null',
    () => JSON.stringify(random()),
    () => JSON.stringify([text(20), random(), null, { a: text(10) }]),
    () => nestedJson(50 + Math.floor(random() * 5_000)),
    () => JSON.stringify({ goal: text(50), input: { blob: 'x'.repeat(Math.floor(random() * 400_000)) } }),
    () => JSON.stringify({ goal: random() > 0.5 ? '' : 42, id: text(80) }),
    () => JSON.stringify({ action: pick(['cancel', 'stop', 7, null]), reason: text(30), extra: true }),
    () => JSON.stringify({ decision: pick(['allow', 'deny', 'maybe']), by: 7 }),
    () =>
      JSON.stringify({
        stepId: text(10),
        taskId: pick(['ok-id', 'bad id!', '']),
        pipeline: 'demo',
        agent: pick(['planner', 'nobody', 'PLANNER']),
        step: 7,
        round: -1,
        goal: text(20),
        context: 'not a list',
        expect: 'poetry',
      }),
    () =>
      JSON.stringify({
        id: text(8),
        ts: 'never',
        pipeline: 'demo',
        taskId: 'fuzz-task',
        kind: pick(['task.failed', 'task.completed', 'task.cancelled']),
        traceparent: '',
        data: { reason: 5 },
      }),
  ];
  const subjectsHeard = [
    () => 'troupe.tasks.demo',
    () => `troupe.tasks.${pick(['nope', 'UPPER', '_invalid', 'a.b', 'x'.repeat(70)])}`,
    () => `troupe.agents.demo.${pick(['planner', 'executor', 'reviewer', 'ghost'])}`,
    () => `troupe.control.${pick(['fuzz-task', 'x', 'a-b-c'])}`,
    () => `troupe.approvals.demo.fuzz-task.${pick(['ap-x', 'q-y', 'z'])}`,
    () => `troupe.events.demo.fuzz-task.${pick(['task.failed', 'task.completed', 'task.cancelled'])}`,
    () => `troupe._inbox.${text(12).replace(/[^a-zA-Z0-9]/g, 'x') || 'x'}`,
  ];
  return { pick, payloads, subjectsHeard };
}
