/**
 * The design's floor: the core workload (bench/fixtures/core.yaml: planner answers; executor makes one real tool call,
 * then answers; reviewer approves) run by the least that DESIGN.md's contract asks for, with nothing else of Troupe's
 * runtime in the way. What issue 33's targets would cost if a task's work were a handful of transitions of a few
 * machines rather than 22 actors' lives (docs/performance.md, "What stands between each figure and its target").
 *
 * What the floor keeps, because the contract asks for it:
 * - a workflow that is an XState machine, one state a step, and each step's agent an XState actor it invokes, whose
 *   model calls and tool call are actions that send their result back (the cheaper form, `actorCpu`);
 * - the task's 21 events, made by the real `EventFactory` (ids, redaction) in the order and with the data a real run
 *   of the same pipeline gave (recorded once at start, so the floor's events are as large as Troupe's);
 * - the tool call's permission check and its real write into the task's own workspace directory;
 * - the workflow's persisted snapshot taken at each step's end.
 *
 * Phase `memory` runs it as `troupe run` does: no server, events to a listener, records held in memory. Phase `nats`
 * runs it durable against a nats-server it starts, with Troupe's streams and buckets (`ensureTroupeStreams`) and the
 * same 23 messages a task as Troupe's trace (`taskTrace --summary`): the task message published, delivered to a
 * durable pull consumer and acked; the workflow record created (the claim) and updated twice (the executor's output
 * rides the final write, as the checkpoint's linger does); `task.accepted`, two event batches (each sent before the
 * record write that follows its events) and `task.completed`, each a JetStream publish with its `Nats-Msg-Id`; the
 * journal's three writes (the model reply asking for the tool, the tool call's claim, its result), each awaited
 * before the step goes on. The client waits for `task.completed` on its subject, as `bench/core.mts`'s does. It
 * counts one task's messages on `>` from another connection, to show the floor sends what Troupe sends.
 *
 * What it leaves out, so its figures are a floor, not a rival: budgets, cancel, heartbeats, steering, activity notes,
 * sessions and memory, retries and fallbacks, tracing, logging, prompt building, usage sums, output previews and
 * refs, the pipeline registry, passivation, the outbox's retry, the checkpoint writer's queue and fence.
 *
 * Given `fewer`, the durable task waits on 3 round trips in a row fewer: the tool call's claim rides the journal write
 * of the model reply that asks for it (2 messages fewer), and each event batch is sent beside the record write that
 * follows its events rather than before it (both awaited). Neither is Troupe's protocol today: each would restate a
 * promise of docs/durability.md (a claim read from the reply's record after a crash; a batch refused by the server
 * while its record was stored loses those events for good). The variant says what the waits cost.
 *
 *   node scripts/bench.mjs designFloor [sequential=300] [concurrent=1000] [phases=memory,nats] [waits=all|fewer]
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AckPolicy, type JetStreamClient, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, loadPipeline, runTask } from '@troupe/coordinator';
import {
  BUCKETS,
  type EventKind,
  parseMessage,
  STREAMS,
  subjects,
  TaskSubmission,
  TroupeEvent,
} from '@troupe/protocol';
import {
  connectBus,
  createLogger,
  EventFactory,
  ensureTroupeStreams,
  newTraceparent,
  systemClock,
} from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';
import { assign, createActor, setup } from 'xstate';

const sequential = Number(process.argv[2] ?? 300);
const concurrent = Number(process.argv[3] ?? 1000);
const phases = (process.argv[4] ?? 'memory,nats').split(',');
/**
 * `fewer`: the durable task with 3 waits in a row fewer, which the protocol would have to restate (see the header):
 * the tool call's claim written with the model reply that asks for it, and each event batch sent beside its record
 * write instead of before it.
 */
const fewerWaits = process.argv[5] === 'fewer';
const PIPELINE = 'core';
/** How many tasks the runner works on at once, as the core bench's coordinator (64 working slots). */
const SLOTS = 64;

const print = (figure: string, value: number, unit: string, extra: Record<string, unknown> = {}) =>
  console.log(
    JSON.stringify({ bench: 'designFloor', figure, value: Math.round(value * 1000) / 1000, unit, ...extra }),
  );
const percentile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;

const root = await mkdtemp(join(tmpdir(), 'troupe-floor-'));

// A real run of the pipeline, once: the events the floor makes, in order, with their data.
const pipeline = await loadPipeline(join(import.meta.dirname, 'fixtures', 'core.yaml'), {
  toolNames: builtinTools().names(),
});
const recorded: TroupeEvent[] = [];
await runTask({
  pipeline,
  goal: 'write out.txt',
  taskId: 'recorded',
  workspaceRoot: join(root, 'recorded'),
  onEvent: (event) => recorded.push(event),
  onlineScoring: false,
});
if (recorded.length !== 21) throw new Error(`the recorded run made ${recorded.length} events, not 21`);

/** The scripted model's replies, as core.script.yaml gives them. */
interface Reply {
  content: string;
  toolCalls: { id: string; name: string; arguments: string }[];
}
const SCRIPT: Record<string, Reply[]> = {
  planner: [{ content: '1. write out.txt', toolCalls: [] }],
  executor: [
    {
      content: '',
      toolCalls: [{ id: 'call_0', name: 'write_file', arguments: '{"path":"out.txt","content":"done"}' }],
    },
    { content: 'Wrote out.txt.', toolCalls: [] },
  ],
  reviewer: [{ content: '{"decision": "approve", "feedback": "ok"}', toolCalls: [] }],
};
/** The executor's one permission rule: `write_file` on `*.txt`. */
const allowed = (tool: string, path: string) => tool === 'write_file' && /^[^/]*\.txt$/.test(path);

/** Where a task's durable writes go in the `nats` phase. */
interface Durable {
  js: JetStreamClient;
  workflows: KV;
  journal: KV;
}

/** One task's run: its events, records and writes. */
class Run {
  readonly scope: { pipeline: string; taskId: string; traceparent: string };
  readonly #factory: EventFactory;
  readonly #durable: Durable | undefined;
  readonly #workspace: string;
  #next = 0;
  #batch: TroupeEvent[] = [];
  #revision = 0;
  #stored: Promise<void> = Promise.resolve();
  /** The persisted snapshot of the workflow at its last step's end (held, or written). */
  record: unknown;

  constructor(
    taskId: string,
    factory: EventFactory,
    durable: Durable | undefined,
    readonly onEvent?: (e: TroupeEvent) => void,
  ) {
    this.scope = { pipeline: PIPELINE, taskId, traceparent: newTraceparent() };
    this.#factory = factory;
    this.#durable = durable;
    this.#workspace = join(root, PIPELINE, taskId);
  }

  /** Makes the next event, which must be of `kind` (the floor makes a real run's events in its order). */
  emit(kind: EventKind): TroupeEvent {
    const model = recorded[this.#next++];
    if (model?.kind !== kind)
      throw new Error(`event ${this.#next} is ${model?.kind}, the floor made ${kind}`);
    const route = {
      ...(model.from === undefined ? {} : { from: model.from }),
      ...(model.to === undefined ? {} : { to: model.to }),
    };
    const event = this.#factory.make(kind, this.scope, model.data as never, route);
    this.onEvent?.(event);
    if (this.#durable && kind !== 'task.accepted' && kind !== 'task.completed') this.#batch.push(event);
    return event;
  }

  /** The claim: the task's record created, and `task.accepted` published. */
  async claim(goal: string): Promise<void> {
    await mkdir(this.#workspace, { recursive: true });
    const accepted = this.emit('task.accepted');
    if (!this.#durable) return;
    this.#revision = await this.#durable.workflows.create(
      `${PIPELINE}.${this.scope.taskId}`,
      JSON.stringify({ taskId: this.scope.taskId, goal, state: 'claimed' }),
    );
    // Off the task's path, as the outbox sends it.
    this.#publish(accepted).catch((error) => console.error('task.accepted', error));
  }

  async think(agent: string, turn: number): Promise<Reply> {
    this.emit('llm.request');
    const reply = SCRIPT[agent]?.[turn - 1];
    if (!reply) throw new Error(`no reply ${turn} for ${agent}`);
    await Promise.resolve();
    this.emit('llm.response');
    // A reply asking for tools is journaled before they run; a step's final reply rides its checkpoint.
    if (this.#durable && reply.toolCalls.length > 0) {
      await this.#stored;
      await this.#durable.journal.create(
        this.#journalKey(agent, turn, 'model'),
        JSON.stringify({
          kind: 'model',
          reply,
          ...(fewerWaits ? { claimed: reply.toolCalls.map((c) => c.id) } : {}),
        }),
      );
    }
    return reply;
  }

  async act(agent: string, turn: number, call: Reply['toolCalls'][number]): Promise<string> {
    this.emit('tool.call');
    const { path, content } = JSON.parse(call.arguments) as { path: string; content: string };
    const target = resolve(this.#workspace, path);
    if (!allowed(call.name, path) || relative(this.#workspace, target).startsWith('..')) {
      throw new Error(`${call.name} on ${path} is not allowed`);
    }
    const key = this.#journalKey(agent, turn, 'tool.0');
    await this.#stored;
    if (this.#durable && !fewerWaits) {
      await this.#durable.journal.create(key, JSON.stringify({ kind: 'tool', state: 'started' }));
    }
    await writeFile(target, content);
    if (this.#durable) {
      await this.#durable.journal.put(
        key,
        JSON.stringify({ kind: 'tool', ok: true, output: `wrote ${path}` }),
      );
    }
    this.emit('tool.result');
    return `wrote ${path}`;
  }

  /**
   * A step's end: the workflow's snapshot, written after the records before it, or held for the next write (`write`
   * false). Nothing of a later step is made durable before it is stored (see {@link stored}).
   */
  checkpoint(snapshot: unknown, write: boolean): void {
    this.record = snapshot;
    const durable = this.#durable;
    if (!durable || !write) return;
    const key = `${PIPELINE}.${this.scope.taskId}`;
    this.#stored = this.#stored.then(async () => {
      if (fewerWaits) {
        const [, revision] = await Promise.all([
          this.#sendBatch(),
          durable.workflows.update(key, JSON.stringify(snapshot), this.#revision),
        ]);
        this.#revision = revision;
        return;
      }
      await this.#sendBatch();
      this.#revision = await durable.workflows.update(key, JSON.stringify(snapshot), this.#revision);
    });
  }

  /** Once every record written so far is stored. */
  stored(): Promise<void> {
    return this.#stored;
  }

  async complete(): Promise<void> {
    const completed = this.emit('task.completed');
    if (this.#durable) await this.#publish(completed);
  }

  #journalKey(agent: string, turn: number, what: string) {
    return `${this.scope.taskId}.${agent}.${turn}.${what}`;
  }

  async #sendBatch() {
    const events = this.#batch;
    if (!this.#durable || events.length === 0) return;
    this.#batch = [];
    const batch = `${this.scope.taskId}:batch:${events[0]?.id}:${events.length}`;
    const h = headers();
    h.set('Nats-Msg-Id', batch);
    await this.#durable.js.publish(
      subjects.eventBatch(PIPELINE, this.scope.taskId),
      JSON.stringify({ batch, events }),
      { headers: h },
    );
  }

  async #publish(event: TroupeEvent) {
    if (!this.#durable) return;
    const h = headers();
    h.set('Nats-Msg-Id', event.id);
    await this.#durable.js.publish(
      subjects.event(PIPELINE, event.taskId, event.kind),
      JSON.stringify(event),
      {
        headers: h,
      },
    );
  }
}

/**
 * The runs in progress, by task id: a machine's context holds its task's id, not its run, since the context is the
 * persisted snapshot (data only, as Troupe's workflow context).
 */
const runs = new Map<string, Run>();
const runOf = (taskId: string): Run => {
  const run = runs.get(taskId);
  if (!run) throw new Error(`no run of task ${taskId}`);
  return run;
};

interface AgentInput {
  taskId: string;
  agent: string;
}
type AgentEvent = { type: 'replied'; reply: Reply } | { type: 'acted' } | { type: 'failed'; error: unknown };
/** A call's failure made the agent's error, which ends its task's workflow in error. */
const fail = (event: AgentEvent): never => {
  throw event.type === 'failed' ? event.error : new Error(`unexpected ${event.type}`);
};
/** An agent: its model calls and tool calls are actions whose results come back as events. */
const agentMachine = setup({
  types: {
    input: {} as AgentInput,
    context: {} as AgentInput & {
      turn: number;
      output: string;
      call: Reply['toolCalls'][number] | undefined;
    },
    events: {} as AgentEvent,
  },
}).createMachine({
  id: 'agent',
  context: ({ input }) => ({ ...input, turn: 1, output: '', call: undefined }),
  initial: 'thinking',
  states: {
    thinking: {
      entry: ({ context: { taskId, agent, turn }, self }) => {
        const run = runOf(taskId);
        run.think(agent, turn).then(
          (reply) => self.send({ type: 'replied', reply }),
          (error) => self.send({ type: 'failed', error }),
        );
      },
      on: {
        replied: [
          {
            guard: ({ event }) => event.reply.toolCalls.length > 0,
            target: 'acting',
            actions: assign(({ event }) => ({ call: event.reply.toolCalls[0] })),
          },
          { target: 'done', actions: assign({ output: ({ event }) => event.reply.content }) },
        ],
        failed: { actions: ({ event }) => fail(event) },
      },
    },
    acting: {
      entry: ({ context: { taskId, agent, turn, call }, self }) => {
        const run = runOf(taskId);
        if (!call) throw new Error('no tool call');
        run.act(agent, turn, call).then(
          () => self.send({ type: 'acted' }),
          (error) => self.send({ type: 'failed', error }),
        );
      },
      on: {
        acted: { target: 'thinking', actions: assign({ turn: ({ context }) => context.turn + 1 }) },
        failed: { actions: ({ event }) => fail(event) },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.output,
});

type Step = 'plan' | 'execute' | 'review';
interface WorkflowContext {
  taskId: string;
  outputs: Partial<Record<Step, string>>;
}
/** The workflow: a state a step, each invoking its agent; a step's end kept in the context. */
const workflowMachine = setup({
  types: {
    input: {} as { taskId: string },
    context: {} as WorkflowContext,
    events: {} as { type: 'go' },
    output: {} as Partial<Record<Step, string>>,
  },
  actors: { agent: agentMachine },
  actions: {
    stepStarted: ({ context }) => {
      runOf(context.taskId).emit('agent.handoff');
      runOf(context.taskId).emit('step.started');
    },
    stepEnded: assign({
      outputs: ({ context, event }, step: Step) => {
        runOf(context.taskId).emit('step.completed');
        return { ...context.outputs, [step]: String((event as { output?: unknown }).output) };
      },
    }),
  },
}).createMachine({
  id: 'workflow',
  context: ({ input }) => ({ taskId: input.taskId, outputs: {} }),
  // Started by an event, not as its initial state: XState starts an initial state's invoked actor before that
  // state's entry actions run, and the step's events come first.
  initial: 'claimed',
  states: {
    claimed: { on: { go: 'plan' } },
    plan: {
      entry: 'stepStarted',
      invoke: {
        src: 'agent',
        input: ({ context }) => ({ taskId: context.taskId, agent: 'planner' }),
        onDone: { target: 'execute', actions: { type: 'stepEnded', params: 'plan' } },
      },
    },
    execute: {
      entry: 'stepStarted',
      invoke: {
        src: 'agent',
        input: ({ context }) => ({ taskId: context.taskId, agent: 'executor' }),
        onDone: { target: 'review', actions: { type: 'stepEnded', params: 'execute' } },
      },
    },
    review: {
      entry: 'stepStarted',
      invoke: {
        src: 'agent',
        input: ({ context }) => ({ taskId: context.taskId, agent: 'reviewer' }),
        onDone: { target: 'done', actions: { type: 'stepEnded', params: 'review' } },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.outputs,
});

/**
 * Runs one task to its end: claimed, its workflow run with a checkpoint at each step's end (the executor's held for
 * the final write, as the linger holds it), `task.completed` once the final record is stored.
 */
async function runFloorTask(run: Run, goal: string): Promise<Partial<Record<Step, string>>> {
  await run.claim(goal);
  runs.set(run.scope.taskId, run);
  const workflow = createActor(workflowMachine, { input: { taskId: run.scope.taskId } });
  let last: unknown = 'claimed';
  const ended = new Promise<Partial<Record<Step, string>>>((resolveEnd, reject) => {
    workflow.subscribe({
      next: (snapshot) => {
        if (snapshot.value === last) return;
        const endedStep = last;
        last = snapshot.value;
        if (endedStep === 'claimed') return;
        // The executor's output waits for the next write; the planner's and the final one are written.
        run.checkpoint(workflow.getPersistedSnapshot(), endedStep !== 'execute');
        if (snapshot.status === 'done') resolveEnd(snapshot.output);
      },
      error: reject,
    });
  });
  workflow.start();
  workflow.send({ type: 'go' });
  try {
    const outputs = await ended;
    await run.stored();
    await run.complete();
    return outputs;
  } finally {
    runs.delete(run.scope.taskId);
  }
}

const factory = new EventFactory(systemClock);
const GOAL = 'write out.txt';
/** The task's result as the core bench checks it: the executor wrote, the reviewer approved. */
const rightResult = (outputs: Partial<Record<Step, string>>) =>
  outputs.execute === 'Wrote out.txt.' && outputs.review?.includes('"approve"') === true;

/** How much CPU this process used in `work`, and its wall time: ms each. */
async function measured(work: () => Promise<void>): Promise<{ cpuMs: number; wallMs: number }> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  await work();
  const { user, system } = process.cpuUsage(cpu);
  return { cpuMs: (user + system) / 1000, wallMs: performance.now() - started };
}

async function sequentialTimes(count: number, one: (i: number) => Promise<void>) {
  const times: number[] = [];
  const { cpuMs, wallMs } = await measured(async () => {
    for (let i = 0; i < count; i++) {
      const started = performance.now();
      await one(i);
      times.push(performance.now() - started);
    }
  });
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 0.5), p99: percentile(times, 0.99), cpuMs: cpuMs / count, wallMs };
}

if (phases.includes('memory')) {
  // As `troupe run`: the task message checked, the task run in memory, its events to a listener.
  const one = async (i: number) => {
    const task = TaskSubmission.parse({ id: `m-${i}`, goal: GOAL });
    const events: TroupeEvent[] = [];
    const run = new Run(task.id as string, factory, undefined, (event) => events.push(event));
    const outputs = await runFloorTask(run, task.goal);
    if (!rightResult(outputs) || events.length !== 21) throw new Error(`task m-${i} ended wrong`);
  };
  for (let i = 0; i < 50; i++) await one(-i - 1);
  const { p50, p99, cpuMs } = await sequentialTimes(sequential, one);
  print('memory: sequential task p50', p50, 'ms', { tasks: sequential });
  print('memory: sequential task p99', p99, 'ms', { tasks: sequential });
  print('memory: CPU per task', cpuMs, 'ms');
  // What of it is the tool's work on this machine's disk: a task's directory made and one small file written.
  const disk = await sequentialTimes(sequential, async (i) => {
    const dir = join(root, 'disk', `d-${i}`);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'out.txt'), 'done');
  });
  print('memory: a directory made and a file written, p50', disk.p50, 'ms', { cpuMs: disk.cpuMs });
}

if (phases.includes('nats')) await natsPhase();
await rm(root, { recursive: true, force: true });

/** nats-server's CPU so far, ms (utime + stime from /proc, in clock ticks of 10 ms). */
async function serverCpuMs(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function natsPhase(): Promise<void> {
  const nats = await startTestNats();
  const connections: NatsConnection[] = [];
  try {
    const setupBus = await connectBus({
      servers: nats.url,
      name: 'floor-setup',
      logger: createLogger({ level: 'silent' }),
    });
    await ensureTroupeStreams(setupBus);
    await setupBus.close();

    // The runner: workflows and agents share one connection, as in a coordinator's process.
    const nc = await connect({ servers: nats.url, name: 'floor-runner' });
    const client = await connect({ servers: nats.url, name: 'floor-client' });
    connections.push(nc, client);
    const js = jetstream(nc);
    const kvm = new Kvm(nc);
    const durable: Durable = {
      js,
      workflows: await kvm.open(BUCKETS.workflows),
      journal: await kvm.open(BUCKETS.journal),
    };
    await (await jetstreamManager(nc)).consumers.add(STREAMS.tasks, {
      durable_name: 'floor',
      ack_policy: AckPolicy.Explicit,
      filter_subject: subjects.task(PIPELINE),
      max_ack_pending: SLOTS,
    });
    const messages = await (await js.consumers.get(STREAMS.tasks, 'floor')).consume({ max_messages: SLOTS });
    void (async () => {
      for await (const message of messages) {
        const parsed = parseMessage(TaskSubmission, message.data);
        if (!parsed.ok || parsed.value.id === undefined) {
          message.term();
          continue;
        }
        const run = new Run(parsed.value.id, factory, durable);
        runFloorTask(run, parsed.value.goal).then(
          () => message.ack(),
          (error) => {
            console.error(`task ${run.scope.taskId}`, error);
            message.nak();
          },
        );
      }
    })();

    const waiting = new Map<string, () => void>();
    const wrong: string[] = [];
    client.subscribe(subjects.event(PIPELINE, '*', 'task.completed'), {
      callback: (_error, msg) => {
        const parsed = parseMessage(TroupeEvent, msg.data);
        if (!parsed.ok || parsed.value.kind !== 'task.completed') return;
        const { taskId, data } = parsed.value;
        if (data.output !== 'Wrote out.txt.' || data.approved !== true) wrong.push(taskId);
        waiting.get(taskId)?.();
        waiting.delete(taskId);
      },
    });
    await client.flush();
    const submitted = (id: string) => {
      const ended = new Promise<void>((resolveEnd) => waiting.set(id, resolveEnd));
      client.publish(subjects.task(PIPELINE), JSON.stringify({ id, goal: GOAL }));
      return ended;
    };

    for (let i = 0; i < 50; i++) await submitted(`warm-${i}`);

    // What one wait costs here: a JetStream publish and its ack, a KV update, each alone, one after the other.
    const trips = async (figure: string, trip: (i: number) => Promise<unknown>) => {
      for (let i = 0; i < 100; i++) await trip(i);
      const { p50, cpuMs } = await sequentialTimes(1000, trip);
      print(figure, p50, 'ms', { cpuMsEach: Math.round(cpuMs * 1000) / 1000 });
    };
    await trips('nats: one JetStream publish and its ack, p50', (i) =>
      js.publish(subjects.event(PIPELINE, 'rt', 'agent.told'), '{}', { msgID: `rt-${i}` }),
    );
    let revision = await durable.workflows.create(`${PIPELINE}.rt`, '{}');
    await trips('nats: one KV update, p50', async () => {
      revision = await durable.workflows.update(`${PIPELINE}.rt`, '{}', revision);
    });

    // One task's messages, every one on `>` seen from a third connection, once all is quiet again.
    const sniff = await connect({ servers: nats.url, name: 'floor-sniff' });
    connections.push(sniff);
    const seen: string[] = [];
    sniff.subscribe('>', {
      callback: (_error, msg) => {
        seen.push(msg.subject);
      },
    });
    await sniff.flush();
    await submitted('traced');
    let count = -1;
    while (count !== seen.length) {
      count = seen.length;
      await new Promise((resolveWait) => setTimeout(resolveWait, 200));
    }
    await sniff.close();
    const classes = new Map<string, number>();
    for (const subject of seen) {
      const kind = subject.startsWith('_INBOX.')
        ? 'replies'
        : subject
            .split('.')
            .slice(0, subject.startsWith('$') ? 4 : 3)
            .join('.');
      classes.set(kind, (classes.get(kind) ?? 0) + 1);
    }
    print('nats: messages a task', seen.length, 'messages', { classes: Object.fromEntries(classes) });

    const serverBefore = await serverCpuMs(nats.pid);
    const seq = await sequentialTimes(sequential, (i) => submitted(`seq-${i}`));
    const serverSeq = (await serverCpuMs(nats.pid)) - serverBefore;
    print('nats: sequential task p50', seq.p50, 'ms', { tasks: sequential });
    print('nats: sequential task p99', seq.p99, 'ms', { tasks: sequential });
    print('nats: sequential CPU per task (this process)', seq.cpuMs, 'ms');
    print('nats: sequential CPU per task (nats-server)', serverSeq / sequential, 'ms');

    if (concurrent > 0) {
      const serverAt = await serverCpuMs(nats.pid);
      const { cpuMs, wallMs } = await measured(async () => {
        const ends = Array.from({ length: concurrent }, (_, i) => submitted(`conc-${i}`));
        await client.flush();
        await Promise.all(ends);
      });
      const server = (await serverCpuMs(nats.pid)) - serverAt;
      print(`nats: ${concurrent} concurrent tasks per second`, concurrent / (wallMs / 1000), 'tasks/s');
      print(`nats: ${concurrent} concurrent, CPU per task (this process)`, cpuMs / concurrent, 'ms');
      print(`nats: ${concurrent} concurrent, CPU per task (nats-server)`, server / concurrent, 'ms');
    }
    print('nats: tasks with a wrong result', wrong.length, 'tasks');
    messages.stop();
  } finally {
    for (const connection of connections) await connection.close().catch(() => {});
    await nats.stop();
  }
}
