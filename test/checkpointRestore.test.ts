import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { replyToHuman } from '@troupe/client';
import { builtinTools, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { type ModelRequest, ScriptedProvider } from '@troupe/llm';
import { BUCKETS, eventsOf, FINAL_EVENT_KINDS, subjects, type TroupeEvent } from '@troupe/protocol';
import { createLogger, defineTool, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { cutAfterWrite } from './support/cutAfterWrite.ts';
import { ofKind, waiter } from './support/harness.ts';

/**
 * The net under the coordinator's task path: one task runs a flow with every step kind — an agent step whose tool
 * has a side effect, a review that rejects once, a parallel step, a foreach step, a step that retries after a model
 * fault, a router agent's route, a human step the test answers, and a sub-pipeline — once as the reference, and then
 * once for each write the reference made to the task's record in the `workflows` bucket: cut off right after the
 * same write (the same state, written as many times before; its connection to NATS cut between two messages, as a
 * kill -9 would leave it), and resumed by a fresh coordinator. Every run must end as the reference did; every tool
 * call take effect once (at most once when the cut fell between its claim and its result: it is then in doubt and
 * not run again); no model reply journaled before the cut be asked for again; and no step the checkpoint had behind
 * it be entered again.
 *
 * The coordinators run in this process (the model calls are counted on the scripted provider, by the provider that
 * made them); the one cut off is stopped before the next starts, so nothing it still does in memory reaches NATS.
 */

const SCRIPT = `
agents:
  worker:
    - toolCalls: [{ name: tally, arguments: { label: draft-1 } }]
    - content: Draft one.
    - toolCalls: [{ name: tally, arguments: { label: draft-2 } }]
    - content: Draft two.
  reviewer:
    - content: '{"decision": "reject", "feedback": "Say more."}'
    - content: '{"decision": "approve", "feedback": "Good."}'
  left:
    - content: Left side.
  right:
    - content: Right side.
  itemer:
${Array.from({ length: 6 }, () => `    - toolCalls: [{ name: tally, arguments: { label: item } }]\n    - content: Item done.`).join('\n')}
  flaky:
    - error: the model is down
    - content: Steady now.
  router:
    - content: '{"target": "ask", "reason": "a person decides"}'
  closer:
    - content: All done.
  subworker:
    - toolCalls: [{ name: tally, arguments: { label: sub } }]
    - content: Sub done.
`;

const tallyRules = '[{ tool: tally, decision: allow }]';
const pipelineYaml = (name: string) => `
version: 1
name: ${name}
models:
  scripted: { provider: scripted, script: ./restore.script.yaml }
defaults: { model: scripted }
agents:
  worker: { instructions: Do the work., tools: [tally], permissions: ${tallyRules} }
  reviewer: { instructions: Review the work. }
  left: { instructions: The left side. }
  right: { instructions: The right side. }
  itemer: { instructions: Handle the item., tools: [tally], permissions: ${tallyRules} }
  flaky: { instructions: Fail once. }
  router: { instructions: Pick where to go. }
  closer: { instructions: Close. }
flow:
  - { id: work, kind: agent, agent: worker }
  - { id: check, kind: review, agent: reviewer, onReject: work, maxRounds: 3 }
  - id: fork
    kind: parallel
    branches:
      a: [{ id: lefty, kind: agent, agent: left }]
      b: [{ id: righty, kind: agent, agent: right }]
  - id: each
    kind: foreach
    items: input.parts
    maxItems: 5
    concurrency: 2
    do:
      - { id: item, kind: agent, agent: itemer }
  - { id: steady, kind: agent, agent: flaky, retry: { max: 2, backoff: 0.05 } }
  - id: pick
    kind: route
    agent: router
    targets:
      ask: a person decides
      sub: go straight on
  - id: ask
    kind: human
    prompt: Go on?
    timeout: 300
  - { id: sub, kind: pipeline, pipeline: ${name}-sub, goal: Do the sub-task }
  - { id: close, kind: agent, agent: closer }
`;
const subPipelineYaml = (name: string) => `
version: 1
name: ${name}-sub
models:
  scripted: { provider: scripted, script: ./restore.script.yaml }
defaults: { model: scripted }
agents:
  subworker: { instructions: Do the sub-task., tools: [tally], permissions: ${tallyRules} }
flow:
  - { id: subwork, kind: agent, agent: subworker }
`;

/** Fails, naming `what`, when `promise` has not settled within `ms`: a stuck stage says which it is. */
const within = <T>(what: string, promise: Promise<T>, ms = 60_000): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done after ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
};

/**
 * A checkpoint of a run, by its content: the `occurrence`-th write of the task's record whose state is named `state`
 * (see {@link checkpointState}).
 */
interface Checkpoint {
  state: string;
  occurrence: number;
}

/** The state a write to the task's record holds (`?` for a payload that is not a record). */
const stateIn = (payload: Buffer): string => {
  try {
    return String((JSON.parse(payload.toString('utf8')) as { state?: unknown }).state ?? '?');
  } catch {
    return '?';
  }
};

/** The fork's branches, which run at once: either may end first. */
const forkBranches = new Set(['lefty', 'righty']);

/**
 * The state a checkpoint is named by: a written state, but with some of the fork's branches ended it is how many are
 * still going, not which (`lefty` in one run is `righty` in another, as the branches' ends race).
 */
const checkpointState = (state: string): string => {
  const names = state.split('+');
  return names.length < forkBranches.size && names.every((name) => forkBranches.has(name))
    ? `${names.length} of the fork's branches`
    : state;
};

/** Whether the last of `states`, the states written so far, is the checkpoint. */
const sameCheckpoint = (checkpoint: Checkpoint, states: string[]): boolean => {
  const named = states.map(checkpointState);
  return (
    named.at(-1) === checkpoint.state &&
    named.filter((s) => s === checkpoint.state).length === checkpoint.occurrence
  );
};

/** The output of a task that completed. */
const outputOf = (final: TroupeEvent) => (final.kind === 'task.completed' ? final.data.output : undefined);

/** One model call as the scripted provider saw it, with which coordinator's provider made it. */
interface ModelCall {
  provider: object;
  pipeline: string;
  taskId: string;
  stepId: string;
  purpose: string | undefined;
  /** Which of the agent's calls in the task it was (the scripted reply it got), when the runtime said. */
  call: number | undefined;
}

/** What one run of the task left behind. */
interface RunOutcome {
  final: TroupeEvent;
  /** Tool side effects: how many times each call (by its step, task id left out, and label) took effect. */
  effects: Map<string, number>;
  /** Model calls per step (task id left out) made by the coordinator that finished the run. */
  calls: Map<string, number>;
  /** Model replies per step (task id left out) in the journal when the first coordinator was cut off. */
  journaled: Map<string, number>;
  /** Steps entered (their `step.started` events, as published) per step (task id left out). */
  starts: Map<string, number>;
  /** Steps with a tool call cut short before its result was recorded: told to the model as in doubt, not run again. */
  inDoubt: Set<string>;
  /** The active state in the record the first coordinator wrote last. */
  cutIn?: string;
}

describe('a task restored from each checkpoint of a run through every step kind', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let answers: NatsBus;
  let home: string;
  const events: TroupeEvent[] = [];
  const { notify, waitFor } = waiter();
  const effects: { taskId: string; callId: string; label: string }[] = [];
  const modelCalls: ModelCall[] = [];
  const answered = new Set<string>();
  const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });

  const tally = defineTool({
    name: 'tally',
    description: 'Counts one unit of work (a side effect that must happen once per call)',
    input: z.object({ label: z.string() }),
    run: async ({ label }, ctx) => {
      effects.push({ taskId: ctx.taskId, callId: ctx.callId, label });
      return `counted ${label}`;
    },
  });

  beforeAll(async () => {
    nats = await startTestNats();
    home = await mkdtemp(join(tmpdir(), 'troupe-restore-'));
    await writeFile(join(home, 'restore.script.yaml'), SCRIPT);
    client = await connect({ servers: nats.url, name: 'restore-test' });
    answers = await NatsBus.connect({ servers: nats.url, name: 'restore-answers', logger });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        // One event, or a batch of them (event batching, the default).
        const parsed = eventsOf(msg.data, msg.subject);
        if (!parsed.ok) return;
        events.push(...parsed.value);
        notify();
        for (const event of parsed.value) {
          // A person answers each question once, whenever it is asked (while no coordinator runs the task, too).
          if (event.kind === 'human.asked' && !answered.has(event.data.questionId)) {
            answered.add(event.data.questionId);
            void replyToHuman(answers, event.data.questionId, {
              kind: 'question',
              answer: { answer: 'yes', by: 'tester' },
            }).catch(() => answered.delete(event.data.questionId));
          }
        }
      },
    });
    await client.flush();
    const complete = ScriptedProvider.prototype.complete;
    vi.spyOn(ScriptedProvider.prototype, 'complete').mockImplementation(async function (
      this: ScriptedProvider,
      request: ModelRequest,
    ) {
      const { pipeline, taskId, stepId, purpose, call } = request.context;
      modelCalls.push({ provider: this, pipeline, taskId, stepId, purpose, call });
      return complete.call(this, request);
    });
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await answers?.close();
    await client?.close();
    await nats?.stop();
    await rm(home, { recursive: true, force: true });
  });

  /** A coordinator running `name` and its sub-pipeline, connected at `url`. */
  const coordinatorAt = async (
    url: string,
    name: string,
    busName: string,
    checkpointLingerMs: number | undefined,
  ) => {
    const bus = await NatsBus.connect({ servers: url, name: busName, logger, reconnect: false });
    const registry = builtinTools();
    registry.register(tally);
    const pipelines = await Promise.all(
      [name, `${name}-sub`].map((p) =>
        loadPipeline(join(home, `${p}.yaml`), { toolNames: registry.names() }),
      ),
    );
    const coordinator = await startCoordinator({
      bus,
      pipelines,
      logger,
      workspaceRoot: join(home, 'workspaces'),
      registry,
      ackWaitMs: 1_500,
      noResponderWaitMs: 5_000,
      ...(checkpointLingerMs === undefined ? {} : { checkpointLingerMs }),
    });
    /** Stops it; `cutOff` when its connection is gone, so its last flush fails (all else stopped before it). */
    return async (cutOff = false) => {
      await coordinator.stop().catch((error: unknown) => {
        if (!cutOff) throw error;
      });
      await bus.close();
    };
  };

  /** Whether `id` is the task `root` or its sub-task. */
  const ofTask = (root: string, id: string) => id === root || id.startsWith(`${root}-sub-`);
  /** A step id with its task's id left out: `T.work.1`, `T-sub.subwork.1` for the sub-task's. */
  const stepOf = (root: string, id: string) =>
    id.startsWith(root) ? `T${id.slice(root.length).replace(/^-sub-\d+-[0-9A-Za-z_-]+\./, '-sub.')}` : id;
  const counted = (keys: string[]) => {
    const counts = new Map<string, number>();
    for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
    return new Map([...counts].sort(([a], [b]) => a.localeCompare(b)));
  };
  /** Each task's journaled model turns as read at its cut, with what each replied: said when a check fails. */
  const journalDetail = new Map<string, string[]>();
  const modelReplies = async (root: string, name: string): Promise<Map<string, number>> => {
    const journal = await new Kvm(client).open(BUCKETS.journal);
    const keys: string[] = [];
    const detail: string[] = [];
    // Each key once: nats.js lists keys through an ordered push consumer, which can hand a key over twice on a busy
    // machine (under two busy loops a journaled turn was listed twice, and failed this test as asked for again).
    const listed = new Set<string>();
    for await (const key of await journal.keys()) listed.add(key);
    for (const key of listed) {
      for (const pipeline of [`${name}-sub`, name]) {
        const prefix = `${pipeline}.${root}`;
        if (key.startsWith(prefix) && key.endsWith('.model')) {
          keys.push(stepOf(root, key.slice(pipeline.length + 1, -'.model'.length).replace(/\.\d+$/, '')));
          const entry = (await journal.get(key))?.json<{ kind?: string; reply?: { content?: string } }>();
          detail.push(`${key} ${entry?.kind} ${JSON.stringify(entry?.reply ?? {}).slice(0, 120)}`);
          break;
        }
      }
    }
    journalDetail.set(root, detail.sort());
    return counted(keys);
  };

  /**
   * Runs task `taskId` on pipeline `name` with a coordinator cut off right after it writes the checkpoint `cutAt`
   * names to the task's record (none when undefined), then lets a fresh coordinator finish it.
   */
  const runTask = async (
    name: string,
    taskId: string,
    cutAt: Checkpoint | undefined,
    checkpointLingerMs: number | undefined,
  ) => {
    await writeFile(join(home, `${name}.yaml`), pipelineYaml(name));
    await writeFile(join(home, `${name}-sub.yaml`), subPipelineYaml(name));
    const proxy = await cutAfterWrite(
      nats.port,
      `$KV.${BUCKETS.workflows}.${taskId}`,
      cutAt && ((payload, before) => sameCheckpoint(cutAt, [...before, payload].map(stateIn))),
    );
    // The coordinators still running: whichever stage fails (one that times out, too), none is left behind.
    const running = new Set<(cutOff?: boolean) => Promise<void>>();
    let over = false;
    /** A coordinator started within the stage's time; one that starts after it ran out is stopped at once. */
    const start = async (url: string, busName: string) => {
      const starting = coordinatorAt(url, name, busName, checkpointLingerMs).then(async (stop) => {
        if (over) await stop(true);
        else running.add(stop);
        return stop;
      });
      const stop = await within(`starting ${busName}`, starting);
      return async (cutOff = false) => {
        await within(`stopping ${busName}`, stop(cutOff));
        running.delete(stop);
      };
    };
    try {
      const stopFirst = await start(proxy.url, `${name}-first`);
      client.publish(
        subjects.task(name),
        JSON.stringify({ id: taskId, goal: 'Run every kind of step', input: { parts: ['a', 'b', 'c'] } }),
      );
      const ended = waitFor(
        () => events.find((e) => e.taskId === taskId && FINAL_EVENT_KINDS.includes(e.kind)),
        `the end of ${taskId}`,
        90_000,
      );
      // A run may write a state fewer times than the reference did (a step's activity is written when it changes):
      // it then ends with no cut.
      const cut =
        cutAt === undefined
          ? false
          : await Promise.race([proxy.cut.then(() => true), ended.then(() => false)]);
      if (!cut) {
        const final = await ended;
        await stopFirst();
        await proxy.stop();
        return {
          final,
          writes: proxy.writes().map(stateIn),
          journaled: new Map<string, number>(),
          cutIn: undefined,
          cutOff: new Set<object>(),
          resumedIn: 0,
        };
      }
      await stopFirst(true);
      await proxy.stop();
      const journaled = await modelReplies(taskId, name);
      const record = await (await new Kvm(client).open(BUCKETS.workflows)).get(taskId);
      const cutIn = record?.json<{ state?: string }>().state;
      // The providers the cut-off coordinator called the model through: their calls are not the resume's.
      const cutOff = new Set(modelCalls.filter((c) => ofTask(taskId, c.taskId)).map((c) => c.provider));
      const resumed = performance.now();
      const stopSecond = await start(nats.url, `${name}-second`);
      const final = await ended;
      const resumedIn = performance.now() - resumed;
      await stopSecond();
      return { final, writes: proxy.writes().map(stateIn), journaled, cutIn, cutOff, resumedIn };
    } finally {
      over = true;
      await Promise.allSettled(
        [...running].map((stop) => within('stopping a coordinator left behind', stop(true), 10_000)),
      );
      await proxy.stop();
    }
  };

  /** What the run of `taskId` did, counting the model calls of the coordinator that finished it. */
  const outcomeOf = (
    taskId: string,
    run: {
      final: TroupeEvent;
      journaled: Map<string, number>;
      cutIn: string | undefined;
      cutOff: Set<object>;
    },
  ): RunOutcome => ({
    final: run.final,
    effects: counted(
      effects
        .filter((e) => ofTask(taskId, e.taskId))
        .map(
          (e) => `${stepOf(taskId, e.callId.replace(/^call_/, '').replace(/\.\d+\.\d+$/, ''))} ${e.label}`,
        ),
    ),
    calls: counted(
      modelCalls
        .filter((c) => ofTask(taskId, c.taskId) && !run.cutOff.has(c.provider) && c.purpose === undefined)
        .map((c) => stepOf(taskId, c.stepId)),
    ),
    journaled: run.journaled,
    starts: counted(
      events
        .filter((e) => ofTask(taskId, e.taskId))
        .flatMap((e) => (e.kind === 'step.started' ? [stepOf(taskId, e.data.stepId)] : [])),
    ),
    inDoubt: new Set(
      events
        .filter((e) => ofTask(taskId, e.taskId))
        .flatMap((e) =>
          e.kind === 'tool.result' && e.data.error?.code === 'in_doubt'
            ? [stepOf(taskId, e.data.stepId)]
            : [],
        ),
    ),
    ...(run.cutIn === undefined ? {} : { cutIn: run.cutIn }),
  });

  // Every checkpoint written (a linger of 0): the reference has one in each kind of step to restore from. By default,
  // the checkpoint that records a local step's output waits for the next write while local steps follow, so some
  // are never written, and a restore goes back further: only the waiting steps' and the end's are sure to be.
  const everyKind = [
    'work',
    'check',
    'lefty',
    'righty',
    'each',
    'steady',
    'retry:steady',
    'pick',
    'ask',
    'sub',
  ];
  it.each([
    { as: 'every checkpoint written', prefix: 'all', lingerMs: 0, kinds: everyKind },
    { as: 'local steps’ checkpoints held back', prefix: 'held', lingerMs: undefined, kinds: ['ask', 'sub'] },
  ])(
    'ends every restored run as the reference ended, each side effect once and no journaled model call again ($as)',
    async ({ prefix, lingerMs, kinds }) => {
      const refId = `${prefix}-ref`;
      const reference = await runTask(`${prefix}-restore-ref`, refId, undefined, lingerMs);
      expect(reference.final.kind, JSON.stringify(reference.final.data)).toBe('task.completed');
      const ref = outcomeOf(refId, reference);
      // The reference ran every kind of step: the review twice, each item, the retry, the question, the sub-task.
      expect([...ref.effects]).toEqual([
        ['T-sub.subwork.1 sub', 1],
        ['T.item.2.i0 item', 1],
        ['T.item.2.i1 item', 1],
        ['T.item.2.i2 item', 1],
        ['T.work.1 draft-1', 1],
        ['T.work.2 draft-2', 1],
      ]);
      const refEvents = events.filter((e) => e.taskId === refId);
      expect(ofKind(refEvents, 'human.answered')).toHaveLength(1);
      expect(ofKind(refEvents, 'route.chosen')).toHaveLength(1);
      expect(ofKind(refEvents, 'branches.joined')).toHaveLength(1);
      expect(ofKind(refEvents, 'items.joined')).toHaveLength(1);
      console.info(
        `reference: ${reference.writes.length} writes to its record (${reference.writes.join(', ')}), model calls ${JSON.stringify([...ref.calls])}`,
      );
      expect(reference.writes.length).toBeGreaterThan(10);

      // The steps in the order the reference entered them, and where each state of a checkpoint begins among them.
      const refEntries = events.flatMap((e) =>
        e.taskId.startsWith(refId) && e.kind === 'step.started'
          ? [
              {
                key: stepOf(refId, e.data.stepId),
                step: e.data.step,
                within: e.data.within?.map((w) => w.step) ?? [],
              },
            ]
          : [],
      );
      const firstEntered = (state: string) => {
        const names = state.split('+').map((name) => name.replace(/^retry:/, ''));
        if (names.includes('completed')) return refEntries.length;
        const places = names.map((name) =>
          refEntries.findIndex((e) => e.step === name || e.within.includes(name)),
        );
        return Math.min(...places.filter((p) => p !== -1), refEntries.length);
      };
      // Each checkpoint the reference wrote, named by its state and how many times that state was written before it.
      const named = reference.writes.map(checkpointState);
      const cuts = named.map((state, i) => ({
        index: i + 1,
        state,
        occurrence: named.slice(0, i + 1).filter((s) => s === state).length,
      }));
      const failures: string[] = [];
      const uncut: Checkpoint[] = [];
      const states: string[] = [];
      const runCut = async (checkpoint: Checkpoint & { index: number }) => {
        const k = checkpoint.index;
        const taskId = `${prefix}-cut-${k}`;
        const started = performance.now();
        const run = await runTask(`${prefix}-restore-${k}`, taskId, checkpoint, lingerMs);
        const outcome = outcomeOf(taskId, run);
        const took = `${((performance.now() - started) / 1000).toFixed(1)}s`;
        if (outcome.cutIn === undefined) uncut.push(checkpoint);
        states.push(
          outcome.cutIn === undefined
            ? `${k} (its ${checkpoint.state} #${checkpoint.occurrence} never came: ended uncut) ${took}`
            : `${k} ${outcome.cutIn} ${took} (resumed in ${(run.resumedIn / 1000).toFixed(1)}s)`,
        );
        const problems: string[] = [];
        // Cut right after that write: it is the record's last.
        if (outcome.cutIn !== undefined && checkpointState(outcome.cutIn) !== checkpoint.state)
          problems.push(`the record says ${outcome.cutIn}, not ${checkpoint.state}`);
        if (outputOf(outcome.final) === undefined || outputOf(outcome.final) !== outputOf(ref.final))
          problems.push(`ended ${outcome.final.kind} ${JSON.stringify(outcome.final.data)}`);
        // Each tool call took effect once, as in the reference; a call cut short between its claim and its result is
        // in doubt and not run again (it took effect at most once).
        for (const call of new Set([...ref.effects.keys(), ...outcome.effects.keys()])) {
          const expected = ref.effects.get(call) ?? 0;
          const made = outcome.effects.get(call) ?? 0;
          const doubted = outcome.inDoubt.has(call.split(' ')[0] ?? '');
          if (made > expected || (made < expected && !doubted))
            problems.push(`${call}: took effect ${made} times, not ${expected}`);
        }
        // No model reply journaled before the cut was asked for again after it.
        for (const step of new Set([
          ...ref.calls.keys(),
          ...outcome.calls.keys(),
          ...outcome.journaled.keys(),
        ])) {
          const journaled = outcome.journaled.get(step) ?? 0;
          const made = outcome.calls.get(step) ?? 0;
          const expected = ref.calls.get(step) ?? 0;
          if (journaled + made > expected) {
            // What was journaled, and every call of the step's agent made for the task (by either coordinator).
            const calls = modelCalls
              .filter((c) => c.taskId === taskId && stepOf(taskId, c.stepId) === step)
              .map(
                (c) =>
                  `${c.stepId} call ${c.call} by ${run.cutOff.has(c.provider) ? 'the first' : 'the second'}`,
              );
            const journal = (journalDetail.get(taskId) ?? []).filter((k) => k.includes(step.slice(1)));
            problems.push(
              `${step}: ${journaled} journaled + ${made} called after the cut, over ${expected} (journal: ${journal.join(' | ')}; calls: ${calls.join(', ')})`,
            );
          }
        }
        // The restored workflow goes on from where its checkpoint has it: a step is entered again only when the
        // checkpoint was taken before it was entered (the record's writes trail the workflow, so the first coordinator
        // may have gone a step or two further), never one the checkpoint has behind it.
        const from = firstEntered(outcome.cutIn ?? '');
        for (const [step, times] of outcome.starts) {
          const place = refEntries.findIndex((e) => e.key === step);
          if (times > (ref.starts.get(step) ?? 0) && (place === -1 || place < from))
            problems.push(`${step} entered ${times} times, though the checkpoint had it behind`);
        }
        if (problems.length > 0)
          failures.push(
            `cut after checkpoint ${k} (${checkpoint.state} #${checkpoint.occurrence}): ${problems.join('; ')}`,
          );
      };
      // A few at a time: each run has its own pipelines, so its coordinators see only its own tasks.
      const queue = [...cuts];
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let next = queue.shift(); next !== undefined; next = queue.shift()) await runCut(next);
        }),
      );
      states.sort((a, b) => Number.parseInt(a, 10) - Number.parseInt(b, 10));
      console.info(`cut after each write, in: ${states.join(', ')}`);
      expect(failures).toEqual([]);
      // The reference wrote a checkpoint in every kind of step: the agent's, the review's, both branches, the items,
      // the retry's wait, the route, the question, the sub-task, and its end.
      const written = new Set(reference.writes.flatMap((state) => state.split('+')));
      for (const state of kinds) expect(written, state).toContain(state);
      expect(written).toContain('completed');
      // Every state's first checkpoint was cut after (only a state written again may not come in every run). With local
      // steps' checkpoints held back, whether one is written depends on how long the steps after it take (a record
      // held past the linger is written, one a later write overtakes is not), which the load decides: only the states
      // never held (a question's, a sub-task's) come in every run.
      const comesInEveryRun = (state: string) =>
        lingerMs === 0 || state.split('+').some((name) => kinds.includes(name));
      expect(uncut.filter((c) => c.occurrence === 1 && comesInEveryRun(c.state))).toEqual([]);
    },
    240_000,
  );
});
