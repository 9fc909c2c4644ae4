/**
 * The design's floor: the core workload (bench/fixtures/core.yaml: planner answers; executor makes one real tool call,
 * then answers; reviewer approves) run by the actors DESIGN.md names and little else of Troupe's runtime. What issue
 * 33's targets would cost if a task were those actors' lives and nothing more (docs/performance.md, "Session 32: the
 * design's floor").
 *
 * What the floor keeps:
 * - the actors DESIGN.md names, as XState machines: a task actor that invokes the workflow, a workflow with a state a
 *   step that invokes each step's call, a step call that invokes the step's agent, and an agent whose model and tool
 *   are injected as actor logic (`provide({ actors })`) and invoked for each call;
 * - the task's 21 events, made by the real `EventFactory` (ids, redaction) in the order and with the data a real run of
 *   the same pipeline gave (recorded once at start, so the floor's events are as large as Troupe's);
 * - the tool call's arguments parsed, its permission checked, and its real write into the task's own directory;
 * - the task tree's persisted snapshot at each step's end.
 *
 * Phase `memory` runs it as `troupe run` does: no server, events to a listener, records held in memory; and again
 * with the tool's disk work left out, to say what the disk costs. Phase `nats` runs it durable against a nats-server
 * it starts, with Troupe's streams and buckets (`ensureTroupeStreams`), the same 23 messages a task as Troupe's trace
 * (`taskTrace --summary`), and the same waits: the task message published, delivered to a durable pull consumer and
 * acked once the task has ended; the workflow record created (the claim) and updated twice (the executor's output
 * rides the final write, as the checkpoint's linger has it); `task.accepted` sent off the task's path; each event
 * batch sent right before the record write that follows its events, its acknowledgement not waited for (as the
 * outbox sends it); `task.completed` once the final record is stored; the journal's three writes (the model reply
 * asking for the tool, after the plan's record is stored; the tool call's claim; its result), each awaited before the
 * step goes on. The client waits for `task.completed` on its subject. One task's messages are counted on `>` from
 * another connection, checked class by class against those 23, and printed with their bytes.
 *
 * What it leaves out, so its figures are a floor: budgets, cancel, pause, heartbeats, steering, activity notes,
 * sessions and memory, prompts, usage sums, output previews and refs, retries and fallbacks, tracing, logging, the
 * pipeline registry, passivation, the outbox's retry, the 20 ms lingers of an event batch and of a held checkpoint
 * (a batch goes with its record write only), the checkpoint writer's queue and fence, a tool's zod schema,
 * time limit and output cap, and the symlink check (the floor's path check is lexical). Its records are smaller than
 * Troupe's (the sizes are printed); its events are not.
 *
 * Given `fewer`, the durable task waits on one round trip fewer: the tool call's claim rides the journal write of the
 * model reply that asks for it (21 messages). That is not Troupe's protocol (a crash would have to read the claim
 * from the reply's record, docs/durability.md); the variant says what one wait costs on the task's path.
 *
 *   node scripts/bench.mjs designFloor [sequential=300] [concurrent=1000] [phases=memory,nats] [waits=all|fewer]
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AckPolicy, type JetStreamClient, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
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
import { assign, createActor, fromPromise, sendTo, setup, toPromise } from 'xstate';

const sequential = Number(process.argv[2] ?? 300);
const concurrent = Number(process.argv[3] ?? 1000);
const phases = (process.argv[4] ?? 'memory,nats').split(',');
/** `fewer`: the tool call's claim written with the model reply that asks for it (see the header). */
const fewerWaits = process.argv[5] === 'fewer';
const PIPELINE = 'core';
/** How many tasks the runner works on at once, as the core bench's coordinator (64 working slots). */
const SLOTS = 64;

const print = (figure: string, value: number, unit: string, extra: Record<string, unknown> = {}) =>
  console.log(JSON.stringify({ bench: 'designFloor', figure, value: round(value), unit, ...extra }));
const round = (value: number) => Math.round(value * 1000) / 1000;
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

const factory = new EventFactory(systemClock);

/** One task's run: its events, records and writes. */
class Run {
  readonly scope: { pipeline: string; taskId: string; traceparent: string };
  readonly #durable: Durable | undefined;
  readonly #disk: boolean;
  readonly #workspace: string;
  readonly #onEvent: ((event: TroupeEvent) => void) | undefined;
  #next = 0;
  #batch: TroupeEvent[] = [];
  #revision = 0;
  /** Every record written so far, stored. */
  #stored: Promise<void> = Promise.resolve();
  /** The acknowledgements of the events sent off the task's path, waited for at its end (a refusal fails it then). */
  readonly #acks: Promise<unknown>[] = [];
  #refused: unknown;
  /** The task tree's persisted snapshot at its last step's end (held, or written). */
  record: unknown;

  constructor(
    taskId: string,
    options: { durable?: Durable; disk?: boolean; onEvent?: (event: TroupeEvent) => void },
  ) {
    this.scope = { pipeline: PIPELINE, taskId, traceparent: newTraceparent() };
    this.#durable = options.durable;
    this.#disk = options.disk ?? true;
    this.#onEvent = options.onEvent;
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
    // The recorded event's data is of its kind, which the check above made `kind`: the union cannot say so.
    const event = factory.make(kind, this.scope, model.data as never, route);
    this.#onEvent?.(event);
    if (this.#durable && kind !== 'task.accepted' && kind !== 'task.completed') this.#batch.push(event);
    return event;
  }

  /** The claim: the task's directory made, its record created, and `task.accepted` sent off its path. */
  async claim(goal: string): Promise<void> {
    if (this.#disk) await mkdir(this.#workspace, { recursive: true });
    const accepted = this.emit('task.accepted');
    if (!this.#durable) return;
    this.#revision = await this.#durable.workflows.create(
      `${PIPELINE}.${this.scope.taskId}`,
      JSON.stringify({ taskId: this.scope.taskId, goal, state: 'claimed' }),
    );
    this.#offPath(this.#publish(accepted));
  }

  /** A model call: the scripted reply; one asking for tools is journaled before they run. */
  async think(agent: string, turn: number): Promise<Reply> {
    this.emit('llm.request');
    const reply = SCRIPT[agent]?.[turn - 1];
    if (!reply) throw new Error(`no reply ${turn} for ${agent}`);
    await Promise.resolve();
    this.emit('llm.response');
    // A step's final reply rides its checkpoint; a local step's first journal write waits for the records before.
    if (this.#durable && reply.toolCalls.length > 0) {
      await this.#stored;
      const claimed = fewerWaits ? { claimed: reply.toolCalls.map((call) => call.id) } : {};
      await this.#durable.journal.create(
        this.#journalKey(agent, turn, 'model'),
        JSON.stringify({ kind: 'model', reply, ...claimed }),
      );
    }
    return reply;
  }

  /** A tool call: its arguments parsed, its permission checked, its claim journaled, the file written, its result. */
  async act(agent: string, turn: number, call: ToolCall): Promise<string> {
    this.emit('tool.call');
    const { path, content } = JSON.parse(call.arguments) as Record<string, unknown>;
    if (typeof path !== 'string' || typeof content !== 'string') throw new Error('bad write_file arguments');
    const target = resolve(this.#workspace, path);
    if (!allowed(call.name, path) || relative(this.#workspace, target).startsWith('..')) {
      throw new Error(`${call.name} on ${path} is not allowed`);
    }
    const key = this.#journalKey(agent, turn, 'tool.0');
    if (this.#durable && !fewerWaits) {
      await this.#durable.journal.create(key, JSON.stringify({ kind: 'tool', state: 'started' }));
    }
    if (this.#disk) await writeFile(target, content);
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
   * A step's end: the task tree's snapshot, written once the records before it are stored (the events made since the
   * last write sent right before it), or held for the next write (`write` false).
   */
  checkpoint(snapshot: unknown, write: boolean): void {
    this.record = snapshot;
    const durable = this.#durable;
    if (!durable || !write) return;
    const key = `${PIPELINE}.${this.scope.taskId}`;
    this.#stored = this.#stored.then(async () => {
      this.#sendBatch();
      this.#revision = await durable.workflows.update(key, JSON.stringify(snapshot), this.#revision);
    });
    // A write that fails fails the task where it is awaited (its journal's next write, or its end), not the process.
    this.#stored.catch(() => {});
  }

  /** The task's end: `task.completed` once the final record is stored, and every event acknowledged. */
  async complete(): Promise<void> {
    await this.#stored;
    if (this.#batch.length > 0) throw new Error(`${this.#batch.length} events made after the final record`);
    const completed = this.emit('task.completed');
    if (!this.#durable) return;
    await Promise.all([...this.#acks, this.#publish(completed)]);
    if (this.#refused !== undefined) throw this.#refused;
  }

  /** An acknowledgement not waited for now: a refusal is kept, to fail the task at its end. */
  #offPath(ack: Promise<unknown>): void {
    this.#acks.push(
      ack.catch((error: unknown) => {
        this.#refused ??= error;
      }),
    );
  }

  #journalKey(agent: string, turn: number, what: string) {
    return `${this.scope.taskId}.${agent}.${turn}.${what}`;
  }

  /** The events made since the last write, in one batch, on the wire before what follows on the connection. */
  #sendBatch(): void {
    const events = this.#batch;
    if (!this.#durable || events.length === 0) return;
    this.#batch = [];
    const batch = `${this.scope.taskId}:batch:${events[0]?.id}:${events.length}`;
    this.#offPath(
      this.#durable.js.publish(
        subjects.eventBatch(PIPELINE, this.scope.taskId),
        JSON.stringify({ batch, events }),
        { msgID: batch },
      ),
    );
  }

  #publish(event: TroupeEvent): Promise<unknown> {
    if (!this.#durable) return Promise.resolve();
    return this.#durable.js.publish(
      subjects.event(PIPELINE, event.taskId, event.kind),
      JSON.stringify(event),
      { msgID: event.id },
    );
  }
}

/**
 * The runs in progress, by task id: a machine's context holds its task's id, not its run, since the context is the
 * persisted snapshot (data only, as Troupe's).
 */
const runs = new Map<string, Run>();
const runOf = (taskId: string): Run => {
  const run = runs.get(taskId);
  if (!run) throw new Error(`no run of task ${taskId}`);
  return run;
};

type ToolCall = Reply['toolCalls'][number];
interface Call {
  taskId: string;
  agent: string;
  turn: number;
}
/** What a step's agent answers: its output, or why it failed. */
interface StepOutcome {
  ok: boolean;
  output: string;
}

/**
 * An agent: `thinking` invokes its model, `acting` its tool, each injected as actor logic; a failure is a final state
 * of its own.
 */
const agentMachine = setup({
  types: {
    input: {} as { taskId: string; agent: string },
    context: {} as Call & { output: string; call: ToolCall | undefined; error: string | undefined },
    output: {} as StepOutcome,
  },
  actors: {
    model: fromPromise<Reply, Call>(() => Promise.reject(new Error('no model given'))),
    tool: fromPromise<string, Call & { call: ToolCall }>(() => Promise.reject(new Error('no tool given'))),
  },
})
  .createMachine({
    id: 'agent',
    context: ({ input }) => ({ ...input, turn: 1, output: '', call: undefined, error: undefined }),
    initial: 'thinking',
    states: {
      thinking: {
        invoke: {
          src: 'model',
          input: ({ context: { taskId, agent, turn } }) => ({ taskId, agent, turn }),
          onDone: [
            {
              guard: ({ event }) => event.output.toolCalls.length > 0,
              target: 'acting',
              actions: assign(({ event }) => ({ call: event.output.toolCalls[0] })),
            },
            { target: 'done', actions: assign({ output: ({ event }) => event.output.content }) },
          ],
          onError: { target: 'failed', actions: assign({ error: ({ event }) => String(event.error) }) },
        },
      },
      acting: {
        invoke: {
          src: 'tool',
          input: ({ context: { taskId, agent, turn, call } }) => {
            if (!call) throw new Error('acting with no tool call');
            return { taskId, agent, turn, call };
          },
          onDone: { target: 'thinking', actions: assign({ turn: ({ context }) => context.turn + 1 }) },
          onError: { target: 'failed', actions: assign({ error: ({ event }) => String(event.error) }) },
        },
      },
      done: { type: 'final' },
      failed: { type: 'final' },
    },
    output: ({ context }) =>
      context.error === undefined
        ? { ok: true, output: context.output }
        : { ok: false, output: context.error },
  })
  .provide({
    actors: {
      model: fromPromise<Reply, Call>(({ input: { taskId, agent, turn } }) =>
        runOf(taskId).think(agent, turn),
      ),
      tool: fromPromise<string, Call & { call: ToolCall }>(({ input: { taskId, agent, turn, call } }) =>
        runOf(taskId).act(agent, turn, call),
      ),
    },
  });

/** A step call: it gives the step's agent its input and waits for its answer (here, the agent is in this process). */
const stepCallMachine = setup({
  types: {
    input: {} as { taskId: string; agent: string },
    context: {} as { taskId: string; agent: string; outcome: StepOutcome | undefined },
    output: {} as StepOutcome,
  },
  actors: { agent: agentMachine },
}).createMachine({
  id: 'stepCall',
  context: ({ input }) => ({ ...input, outcome: undefined }),
  initial: 'calling',
  states: {
    calling: {
      invoke: {
        src: 'agent',
        input: ({ context: { taskId, agent } }) => ({ taskId, agent }),
        onDone: { target: 'answered', actions: assign({ outcome: ({ event }) => event.output }) },
      },
    },
    answered: { type: 'final' },
  },
  output: ({ context }) => context.outcome ?? { ok: false, output: 'no answer' },
});

type Step = 'plan' | 'execute' | 'review';
const STEPS: readonly [Step, string][] = [
  ['plan', 'planner'],
  ['execute', 'executor'],
  ['review', 'reviewer'],
];
interface WorkflowContext {
  taskId: string;
  /** The step under way: its place in {@link STEPS}. */
  at: number;
  outputs: Partial<Record<Step, string>>;
  failure: string | undefined;
}
const stepAt = ({ at }: WorkflowContext): [Step, string] => {
  const step = STEPS[at];
  if (!step) throw new Error(`no step ${at}`);
  return step;
};
/** The workflow: each step's call invoked in turn; a step's end kept in the context, a failure ends it. */
const workflowMachine = setup({
  types: {
    input: {} as { taskId: string },
    context: {} as WorkflowContext,
    events: {} as { type: 'go' },
    output: {} as WorkflowContext,
  },
  actors: { stepCall: stepCallMachine },
  actions: {
    stepStarted: ({ context }) => {
      const run = runOf(context.taskId);
      run.emit('agent.handoff');
      run.emit('step.started');
    },
    stepEnded: ({ context }) => {
      runOf(context.taskId).emit('step.completed');
    },
  },
}).createMachine({
  id: 'workflow',
  // Started by an event, not in its first step: XState starts an initial state's invoked actor before that state's
  // entry actions run, and the step's events come first.
  initial: 'claimed',
  context: ({ input }) => ({ taskId: input.taskId, at: 0, outputs: {}, failure: undefined }),
  states: {
    claimed: { on: { go: 'step' } },
    step: {
      entry: 'stepStarted',
      invoke: {
        src: 'stepCall',
        input: ({ context }) => ({ taskId: context.taskId, agent: stepAt(context)[1] }),
        onDone: [
          {
            guard: ({ event }) => !event.output.ok,
            target: 'failed',
            actions: assign({ failure: ({ event }) => event.output.output }),
          },
          {
            guard: ({ context }) => context.at + 1 === STEPS.length,
            target: 'done',
            actions: [
              'stepEnded',
              assign({ outputs: ({ context, event }) => outputsWith(context, event.output) }),
            ],
          },
          {
            target: 'step',
            reenter: true,
            actions: [
              'stepEnded',
              assign(({ context, event }) => ({
                outputs: outputsWith(context, event.output),
                at: context.at + 1,
              })),
            ],
          },
        ],
      },
    },
    done: { type: 'final' },
    failed: { type: 'final' },
  },
  output: ({ context }) => context,
});
const outputsWith = (context: WorkflowContext, outcome: StepOutcome) => ({
  ...context.outputs,
  [stepAt(context)[0]]: outcome.output,
});

/** The task actor: it owns the task from its claim to its end, and invokes its workflow. */
const taskMachine = setup({
  types: {
    input: {} as { taskId: string },
    context: {} as { taskId: string; ended: WorkflowContext | undefined },
    events: {} as { type: 'go' },
    output: {} as WorkflowContext | undefined,
  },
  actors: { workflow: workflowMachine },
}).createMachine({
  id: 'task',
  context: ({ input }) => ({ taskId: input.taskId, ended: undefined }),
  initial: 'running',
  states: {
    running: {
      invoke: {
        id: 'workflow',
        src: 'workflow',
        input: ({ context }) => ({ taskId: context.taskId }),
        onDone: { target: 'ended', actions: assign({ ended: ({ event }) => event.output }) },
      },
      on: { go: { actions: sendTo('workflow', { type: 'go' }) } },
    },
    ended: { type: 'final' },
  },
  output: ({ context }) => context.ended,
});

/**
 * Runs one task to its end: claimed, its task actor run with a checkpoint of its tree at each step's end (the
 * executor's held for the final write, as the linger holds it), `task.completed` once the final record is stored.
 */
async function runFloorTask(run: Run, goal: string): Promise<WorkflowContext> {
  await run.claim(goal);
  runs.set(run.scope.taskId, run);
  try {
    const task = createActor(taskMachine, { input: { taskId: run.scope.taskId } });
    const ended = toPromise(task);
    task.start();
    const workflow = task.getSnapshot().children.workflow;
    if (!workflow) throw new Error('the task actor has no workflow');
    let stepsEnded = 0;
    workflow.subscribe({
      next: (snapshot) => {
        const count = Object.keys(snapshot.context.outputs).length;
        if (count === stepsEnded && snapshot.status === 'active') return;
        stepsEnded = count;
        // The executor's output waits for the next write; the planner's and the final one are written.
        run.checkpoint(task.getPersistedSnapshot(), snapshot.status !== 'active' || count !== 2);
      },
      // The task actor fails with its workflow, and `ended` says so.
      error: () => {},
    });
    task.send({ type: 'go' });
    const outcome = await ended;
    if (!outcome) throw new Error('the task actor ended without its workflow');
    await run.complete();
    return outcome;
  } finally {
    runs.delete(run.scope.taskId);
  }
}

const GOAL = 'write out.txt';
/** The task's result as the core bench checks it: the executor wrote, the reviewer approved. */
const rightResult = ({ outputs, failure }: WorkflowContext) =>
  failure === undefined &&
  outputs.execute === 'Wrote out.txt.' &&
  outputs.review?.includes('"approve"') === true;

/** How much CPU this process used in `work`, and its wall time: ms each. */
async function measured(work: () => Promise<void>): Promise<{ cpuMs: number; wallMs: number }> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  await work();
  const { user, system } = process.cpuUsage(cpu);
  return { cpuMs: (user + system) / 1000, wallMs: performance.now() - started };
}

async function sequentialTimes(count: number, one: (i: number) => Promise<unknown>) {
  const times: number[] = [];
  const { cpuMs, wallMs } = await measured(async () => {
    for (let i = 0; i < count; i++) {
      const started = performance.now();
      await one(i);
      times.push(performance.now() - started);
    }
  });
  times.sort((a, b) => a - b);
  return {
    p50: percentile(times, 0.5),
    p99: percentile(times, 0.99),
    cpuMs: cpuMs / count,
    meanMs: wallMs / count,
  };
}

if (phases.includes('memory')) {
  // As `troupe run`: the task message checked, the task run in memory, its events to a listener. Then the same with
  // the tool's disk work left out (no directory made, no file written), and that disk work alone.
  for (const disk of [true, false]) {
    const one = async (i: number) => {
      const task = TaskSubmission.parse({ id: `m-${disk ? '' : 'n'}${i}`, goal: GOAL });
      const events: TroupeEvent[] = [];
      const run = new Run(task.id as string, { disk, onEvent: (event) => events.push(event) });
      const outcome = await runFloorTask(run, task.goal);
      if (!rightResult(outcome) || events.length !== 21) throw new Error(`task ${task.id} ended wrong`);
    };
    for (let i = 0; i < 50; i++) await one(-i - 1);
    const { p50, p99, cpuMs, meanMs } = await sequentialTimes(sequential, one);
    const phase = disk ? 'memory' : 'memory, no disk';
    print(`${phase}: sequential task p50`, p50, 'ms', {
      tasks: sequential,
      p99Ms: round(p99),
      meanMs: round(meanMs),
    });
    print(`${phase}: CPU per task`, cpuMs, 'ms');
  }
  const disk = await sequentialTimes(sequential, async (i) => {
    const dir = join(root, 'disk', `d-${i}`);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'out.txt'), 'done');
  });
  print('memory: a directory made and a file written, p50', disk.p50, 'ms', { cpuMs: round(disk.cpuMs) });
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
    const waiting = new Map<string, () => void>();
    const ended = (taskId: string) => {
      waiting.get(taskId)?.();
      waiting.delete(taskId);
    };
    /** Tasks whose run ended with a wrong result, or failed (the client is told it ended). */
    const wrong: string[] = [];
    void (async () => {
      for await (const message of messages) {
        const parsed = parseMessage(TaskSubmission, message.data);
        if (!parsed.ok || parsed.value.id === undefined) {
          message.term();
          continue;
        }
        const taskId = parsed.value.id;
        runFloorTask(new Run(taskId, { durable }), parsed.value.goal).then(
          (outcome) => {
            if (!rightResult(outcome)) wrong.push(taskId);
            message.ack();
          },
          (error) => {
            console.error(`task ${taskId} failed`, error);
            wrong.push(taskId);
            message.term();
            ended(taskId);
          },
        );
      }
    })();

    client.subscribe(subjects.event(PIPELINE, '*', 'task.completed'), {
      callback: (_error, msg) => {
        const parsed = parseMessage(TroupeEvent, msg.data);
        if (parsed.ok && parsed.value.kind === 'task.completed') ended(parsed.value.taskId);
      },
    });
    await client.flush();
    const submitted = (id: string) => {
      const end = new Promise<void>((resolveEnd) => waiting.set(id, resolveEnd));
      client.publish(subjects.task(PIPELINE), JSON.stringify({ id, goal: GOAL }));
      return end;
    };

    // Warm: code paths compiled, consumer and buckets in use (the memory phase, when it ran, warmed the machines).
    for (let i = 0; i < 200; i++) await submitted(`warm-${i}`);

    // What one wait costs here: a JetStream publish and its ack, a KV update, each alone, one after the other.
    const trips = async (figure: string, trip: (i: number) => Promise<unknown>) => {
      for (let i = 0; i < 100; i++) await trip(i);
      const { p50, cpuMs } = await sequentialTimes(1000, trip);
      print(figure, p50, 'ms', { cpuMsEach: round(cpuMs) });
    };
    await trips('nats: one JetStream publish and its ack, p50', (i) =>
      js.publish(subjects.event(PIPELINE, 'rt', 'agent.told'), '{}', { msgID: `rt-${i}` }),
    );
    let revision = await durable.workflows.create(`${PIPELINE}.rt`, '{}');
    await trips('nats: one KV update, p50', async () => {
      revision = await durable.workflows.update(`${PIPELINE}.rt`, '{}', revision);
    });

    // One task's messages, every one on `>` seen from a third connection, once all is quiet again; the consumer's
    // pulls for more tasks are the runner's, not the task's, and are not counted.
    const sniff = await connect({ servers: nats.url, name: 'floor-sniff' });
    connections.push(sniff);
    const seen: { subject: string; bytes: number }[] = [];
    sniff.subscribe('>', {
      callback: (_error, msg) => {
        if (!msg.subject.startsWith('$JS.API.CONSUMER.MSG.NEXT.')) {
          seen.push({ subject: msg.subject, bytes: msg.data.length });
        }
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
    const classes: Record<string, { messages: number; bytes: number }> = {};
    for (const { subject, bytes } of seen) {
      const kind = subject.startsWith('_INBOX.') ? 'replies' : subject.split('.').slice(0, 3).join('.');
      const sum = classes[kind] ?? { messages: 0, bytes: 0 };
      classes[kind] = { messages: sum.messages + 1, bytes: sum.bytes + bytes };
    }
    print('nats: messages a task', seen.length, 'messages', { classes });
    // Troupe's trace, class by class (`taskTrace --summary`); `fewer` writes one journal entry less.
    const expected: Record<string, number> = {
      'troupe.tasks.core': 2,
      '$JS.ACK.TASKS': 1,
      '$KV.workflows.core': 3,
      '$KV.journal.traced': fewerWaits ? 2 : 3,
      'troupe.events.core': 4,
      replies: fewerWaits ? 9 : 10,
    };
    const counted = Object.fromEntries(
      Object.entries(classes).map(([kind, { messages }]) => [kind, messages]),
    );
    if (Object.keys({ ...expected, ...counted }).some((kind) => counted[kind] !== expected[kind]))
      throw new Error(`the floor's task sent ${JSON.stringify(counted)}, not ${JSON.stringify(expected)}`);

    const serverBefore = await serverCpuMs(nats.pid);
    const seq = await sequentialTimes(sequential, (i) => submitted(`seq-${i}`));
    const serverSeq = (await serverCpuMs(nats.pid)) - serverBefore;
    print('nats: sequential task p50', seq.p50, 'ms', {
      tasks: sequential,
      p99Ms: round(seq.p99),
      meanMs: round(seq.meanMs),
    });
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
    print('nats: tasks with a wrong result or failed', wrong.length, 'tasks');
    messages.stop();
  } finally {
    for (const connection of connections) await connection.close().catch(() => {});
    await nats.stop();
  }
}
