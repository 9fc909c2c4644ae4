import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import { ControlReceipt, subjects, WorkflowRecord } from '@troupe/protocol';
import {
  type AgentHost,
  createLogger,
  JournalEntry,
  type Logger,
  type PermissionRule,
  StepJournal,
  startAgentHost,
  ToolRegistry,
} from '@troupe/runtime';
import { captureLogger, type LogLine, MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import type { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { versionHash } from '../src/config/pipelineVersion.ts';
import { startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';
import { timePasser } from './support/passTime.ts';
import { HOUR, pipeline, running, twoSteps } from './support/steeringRunner.ts';

/** A model whose calls wait until the test answers them, or (`auto`) are answered at once with `done`. */
function playedModel(auto = false) {
  const asked: { request: ModelRequest; answer: (content: string, toolCalls?: ToolCall[]) => void }[] = [];
  const aborted: ModelRequest[] = [];
  const model: ModelProvider = {
    provider: 'played',
    model: 'played-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve) => {
        const answer = (content: string, toolCalls: ToolCall[] = []) =>
          resolve({
            content,
            toolCalls,
            usage: { inputTokens: 10, outputTokens: 2, cachedTokens: 0 },
            finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
            model: 'played-1',
          });
        asked.push({ request, answer });
        request.signal?.addEventListener('abort', () => aborted.push(request), { once: true });
        if (auto) answer('done');
      }),
  };
  /** Answers the oldest call not answered yet. */
  let answered = 0;
  const next = async (content: string, toolCalls?: ToolCall[]) => {
    await expect.poll(() => asked.length).toBeGreaterThan(answered);
    asked[answered++]?.answer(content, toolCalls);
  };
  return { model, asked, aborted, next };
}

const logger = createLogger({ level: 'silent' });
let root: string;
const hosts: AgentHost[] = [];
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'troupe-local-step-'));
  // The workflow and the host share each step's request and reply (neither is copied in-process): frozen here, a part
  // that changes one fails these tests instead of changing what the other holds.
  vi.stubEnv('TROUPE_FREEZE_LOCAL', '1');
});
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.stop()));
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await rm(root, { recursive: true, force: true });
});

interface WorldOptions {
  config?: PipelineConfig;
  model?: ModelProvider;
  /** Run steps in-process through the host's `local` (else over the bus, as before the local hop). */
  local?: boolean;
  maxLocalSteps?: number;
  rules?: PermissionRule[];
  registry?: ToolRegistry;
  /** A second host on the bus, started before the first (so it gets the first step sent over the bus). */
  second?: ModelProvider;
  /** The bus's logger, where message lines go; silent when absent. */
  busLogger?: Logger;
  /** Where the workflow records go; a new bucket when absent. */
  store?: MemoryKv<WorkflowRecord>;
  /** The agents whose steps run in-process (with `local`); all of them when absent. */
  localAgents?: string[];
  /** The runner's passivation and checkpoint linger (its defaults when absent). */
  passivateAfterMs?: number;
  checkpointLingerMs?: number;
  /** Local steps' replies held while the test says so (see {@link gatedLocal}). */
  gated?: boolean;
}

/** A pipeline runner and a real agent host on one in-memory bus, as a coordinator that hosts its agents has them. */
async function world(options: WorldOptions = {}) {
  const config = options.config ?? twoSteps;
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock, ...(options.busLogger ? { logger: options.busLogger } : {}) });
  const journal = new StepJournal(new MemoryKv(JournalEntry));
  const host = (model: ModelProvider, maxLocalSteps: number) =>
    startAgentHost({
      bus,
      pipeline: 'unit',
      agents: Object.keys(config.agents).map((name) => ({
        name,
        instructions: `${name}: do it.`,
        model,
        tools: options.registry ? ['note'] : [],
        rules: options.rules ?? [],
        maxTurns: 5,
      })),
      registry: options.registry ?? new ToolRegistry(),
      workspaceRoot: root,
      logger,
      clock,
      journal,
      version: versionHash(config, {}),
      maxLocalSteps,
    });
  if (options.second) hosts.push(host(options.second, 0));
  const played = playedModel(options.model === undefined);
  const here = host(options.model ?? played.model, options.maxLocalSteps ?? 4);
  hosts.push(here);
  const gate = options.gated ? gatedLocal(here) : undefined;
  const intake = new MemoryTaskIntake();
  const runner = await startPipelineRunner({
    bus,
    intake,
    config,
    store: options.store ?? new MemoryKv(WorkflowRecord),
    logger,
    clock,
    concurrency: 4,
    stepHeartbeatMs: 10 * HOUR,
    ...((options.local ?? true)
      ? { localSteps: localOf(gate?.local ?? here.local, options.localAgents) }
      : {}),
    ...(options.passivateAfterMs === undefined ? {} : { passivateAfterMs: options.passivateAfterMs }),
    ...(options.checkpointLingerMs === undefined ? {} : { checkpointLingerMs: options.checkpointLingerMs }),
  });
  running.push(runner);
  const control = (taskId: string, message: Record<string, unknown>) =>
    bus.request(subjects.control(taskId), message, ControlReceipt, { timeoutMs: 1_000 });
  const final = async (taskId: string) => {
    await expect
      .poll(() =>
        bus.events.find((e) => e.taskId === taskId && e.kind.startsWith('task.') && isFinal(e.kind)),
      )
      .toBeDefined();
    return bus.events.find((e) => e.taskId === taskId && isFinal(e.kind));
  };
  const agentMessages = () => bus.messages.filter((m) => m.subject.startsWith('troupe.agents.'));
  const pass = timePasser(bus, clock);
  return { clock, bus, intake, control, final, agentMessages, here, runner, played, pass, gate };
}

/** The host's local steps, or only those of `agents`: the others go over the bus. */
const localOf = (local: AgentHost['local'], agents: string[] | undefined): AgentHost['local'] =>
  agents === undefined
    ? local
    : {
        tryTake: (request, hooks) =>
          agents.includes(request.agent) ? local.tryTake(request, hooks) : undefined,
      };

/**
 * The host's local steps, whose replies the test can hold (`hold`) and then give the workflow all in one turn
 * (`release`). What the steps note while held (their activity: a model that answered) is dropped, not delayed: in this
 * world a host's note comes well before its step's reply and wakes a sleeping task first, so the replies would be heard
 * by a task awake again. Held and given at once, both reach the task while it sleeps, as replies can that come while
 * it is still waking.
 */
function gatedLocal(host: AgentHost) {
  let holding = false;
  const replies: (() => void)[] = [];
  const local: AgentHost['local'] = {
    tryTake: (request, hooks) => {
      const call = host.local.tryTake(request, {
        ...hooks,
        onActivity: (heartbeat) => {
          if (!holding) hooks.onActivity(heartbeat);
        },
      });
      if (!call) return undefined;
      const reply = call.reply.then((value) =>
        holding ? new Promise<typeof value>((resolve) => replies.push(() => resolve(value))) : value,
      );
      return { reply, cancel: () => call.cancel() };
    },
  };
  return {
    local,
    hold: () => {
      holding = true;
    },
    held: () => replies.length,
    release: () => {
      holding = false;
      for (const give of replies.splice(0)) give();
    },
  };
}

/**
 * A bucket of workflow records whose updates wait, while held, until the test lets them through: held from the start,
 * or from `hold()` when `held` is false.
 */
function heldRecords(held = true) {
  const store = new MemoryKv(WorkflowRecord);
  const waiting: (() => void)[] = [];
  const stored: WorkflowRecord[] = [];
  let holding = held;
  const update = store.update.bind(store);
  store.update = async (key, value, revision) => {
    if (holding) await new Promise<void>((resolve) => waiting.push(resolve));
    const written = await update(key, value, revision);
    if (written !== undefined) stored.push(value);
    return written;
  };
  return {
    store,
    /** The records updated so far, in order. */
    stored,
    waiting: () => waiting.length,
    hold: () => {
      holding = true;
    },
    /** Lets the oldest held write through; those after it stay held. */
    letOne: () => waiting.shift()?.(),
    letThrough: () => {
      holding = false;
      for (const write of waiting.splice(0)) write();
    },
  };
}

const isFinal = (kind: string) =>
  kind === 'task.completed' || kind === 'task.failed' || kind === 'task.cancelled';

/** Two branches whose agents run here, in parallel, then a builder's step sent over the bus. */
const branchesThenBuild = (join?: 'first') =>
  pipeline(
    [
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          left: [{ id: 'left', kind: 'agent', agent: 'planner' }],
          right: [{ id: 'right', kind: 'agent', agent: 'checker' }],
        },
        ...(join ? { join } : {}),
      },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ],
    {
      agents: {
        planner: { instructions: 'Plan.' },
        checker: { instructions: 'Check.' },
        builder: { instructions: 'Build.' },
      },
    },
  );

/**
 * A world running `config`'s task `taskId` whose two local branches' model calls are asked and the task passivated;
 * the branches' replies are then held (see {@link gatedLocal}) while both models answer, and the records' writes from
 * then on are held too, until the test lets them through.
 */
async function asleepOnTwoBranches(
  config: PipelineConfig,
  taskId: string,
  checkpointLingerMs: number | undefined,
) {
  const records = heldRecords(false);
  const played = playedModel();
  const local = await world({
    config,
    model: played.model,
    store: records.store,
    localAgents: ['planner', 'checker'],
    passivateAfterMs: 1_000,
    ...(checkpointLingerMs === undefined ? {} : { checkpointLingerMs }),
    gated: true,
  });
  local.intake.deliver({ id: taskId, goal: 'build it' });
  await expect.poll(() => played.asked.length).toBe(2);
  await local.pass(3_000);
  expect(local.runner.passivated()).toBe(1);
  local.gate?.hold();
  played.asked[0]?.answer('left done');
  played.asked[1]?.answer('right done');
  await expect.poll(() => local.gate?.held()).toBe(2);
  expect(local.runner.passivated()).toBe(1);
  records.hold();
  return { local, records, played };
}

describe('a step whose agent is hosted in the workflow’s own process', () => {
  it('sends the step after a local one over the bus only once the checkpoint holding the local step’s output is stored', async () => {
    const records = heldRecords();
    const local = await world({ store: records.store, localAgents: ['planner'] });
    local.intake.deliver({ id: 'task-owed', goal: 'build it' });
    // The planner replied here; the checkpoint recording its output is being written, and held.
    await expect.poll(() => records.waiting()).toBe(1);
    await local.bus.settled();
    expect(local.agentMessages()).toEqual([]);
    records.letThrough();
    expect((await local.final('task-owed'))?.kind).toBe('task.completed');
    expect(local.agentMessages().map((m) => m.subject)).toContain('troupe.agents.unit.builder');
  });

  // With no linger each output's record is written at once, and the step must wait for the second (it did not before
  // 2de251a). With the default one the first record is held back and the second takes its place, so both outputs go in
  // one write, once the builder's step waits for it: the held path, end to end.
  it.each([
    ['no linger', 0],
    ['the default linger', undefined],
  ])(
    'sends the step after two local branches that replied while the task slept only once a record holding both outputs is stored (%s)',
    async (_, linger) => {
      const { local, records, played } = await asleepOnTwoBranches(
        branchesThenBuild(),
        'task-asleep',
        linger,
      );
      // Both replies reach the sleeping task in one turn: both are kept, and heard at the wake one after the other. The
      // step after the join may be sent only once a record holding the second output is stored: the output of a local
      // step is owed from when the workflow hears it. The records go through one at a time until the step is sent.
      local.gate?.release();
      for (let writes = 0; local.agentMessages().length === 0; writes++) {
        expect(writes).toBeLessThan(5);
        await expect.poll(() => records.waiting() > 0 || local.agentMessages().length > 0).toBe(true);
        records.letOne();
        await local.bus.settled();
      }
      expect(local.agentMessages().map((m) => m.subject)).toEqual(['troupe.agents.unit.builder']);
      const lastStored = JSON.stringify(records.stored.at(-1));
      expect(lastStored).toContain('left done');
      expect(lastStored).toContain('right done');
      records.letThrough();
      await expect.poll(() => played.asked.length).toBe(3);
      played.asked[2]?.answer('built');
      expect((await local.final('task-asleep'))?.kind).toBe('task.completed');
    },
  );

  it('goes on after a join: first whose two local branches replied while the task slept, the second reply unheard', async () => {
    const { local, records, played } = await asleepOnTwoBranches(branchesThenBuild('first'), 'task-first', 0);
    // The first reply heard ends the parallel step and stops the other branch's call: its kept reply is heard by
    // nobody, and owes nothing, so the builder's step goes once the record holding the first output is stored.
    local.gate?.release();
    records.letThrough();
    await expect.poll(() => played.asked.length).toBe(3);
    expect(local.agentMessages().map((m) => m.subject)).toEqual(['troupe.agents.unit.builder']);
    played.asked[2]?.answer('built');
    const final = await local.final('task-first');
    expect(final?.kind).toBe('task.completed');
    expect(final?.kind === 'task.completed' && final.data.output).toBe('built');
  });

  it('runs with no message on troupe.agents.>, publishing the same events in the same order as over the bus', async () => {
    const local = await world();
    local.intake.deliver({ id: 'task-1', goal: 'build it' });
    expect((await local.final('task-1'))?.kind).toBe('task.completed');
    expect(local.agentMessages()).toEqual([]);

    const remote = await world({ local: false });
    remote.intake.deliver({ id: 'task-1', goal: 'build it' });
    expect((await remote.final('task-1'))?.kind).toBe('task.completed');
    expect(remote.agentMessages().length).toBeGreaterThan(0);

    const kinds = (bus: MemoryBus) => bus.events.filter((e) => e.taskId === 'task-1').map((e) => e.kind);
    expect(kinds(local.bus)).toEqual(kinds(remote.bus));
    // The same facts too: each event's id (what de-duplicates a resumed run's events) is the one the bus path gives.
    const ids = (bus: MemoryBus) => bus.events.filter((e) => e.taskId === 'task-1').map((e) => e.id);
    expect(ids(local.bus)).toEqual(ids(remote.bus));
    expect(kinds(local.bus)).toContain('llm.response');
  });

  it('logs each step as taken and answered, at the bus’s level with the bus path’s fields, marked local', async () => {
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
    const here = captureLogger('debug');
    const local = await world({ config, busLogger: here.logger });
    local.intake.deliver({ id: 'task-l', goal: 'plan it' });
    expect((await local.final('task-l'))?.kind).toBe('task.completed');
    expect(local.agentMessages()).toEqual([]);
    const subject = 'troupe.agents.unit.planner';
    const localLines = here.lines.filter((line) => line.local === true);
    expect(localLines).toEqual([
      expect.objectContaining({
        level: 20,
        dir: 'out',
        subject,
        taskId: 'task-l',
        from: 'workflow',
        to: 'planner',
        kind: 'agent.step',
        msg: `→ ${subject} (in this process)`,
      }),
      expect.objectContaining({
        level: 20,
        dir: 'in',
        subject,
        taskId: 'task-l',
        from: 'planner',
        to: 'workflow',
        kind: 'agent.reply',
        ok: true,
        durationMs: 0,
      }),
    ]);

    const there = captureLogger('debug');
    const remote = await world({ config, local: false, busLogger: there.logger });
    remote.intake.deliver({ id: 'task-l', goal: 'plan it' });
    expect((await remote.final('task-l'))?.kind).toBe('task.completed');
    // The same field names as the workflow's lines of the step over the bus, and `local`.
    const keys = (line: LogLine | undefined) => Object.keys(line ?? {}).sort();
    const sent = there.lines.find((line) => line.dir === 'out' && line.subject === subject);
    const heard = there.lines.find((line) => line.dir === 'in' && line.kind === 'agent.reply');
    expect(sent).toBeDefined();
    expect(keys(localLines[0])).toEqual([...keys(sent), 'local'].sort());
    expect(heard).toMatchObject({ level: 20, from: 'planner', to: 'workflow', taskId: 'task-l' });
    expect(keys(localLines[1])).toEqual([...keys(heard), 'local', 'ok', 'durationMs'].sort());
  });

  it('pauses the step at its model call and runs it again on resume, in-process both times', async () => {
    const played = playedModel();
    const { intake, control, final, agentMessages, bus } = await world({ model: played.model });
    intake.deliver({ id: 'task-p', goal: 'build it' });
    await expect.poll(() => played.asked.length).toBe(1);
    expect(await control('task-p', { action: 'pause', by: 'ann' })).toMatchObject({ outcome: 'paused' });
    await bus.settled();
    // The host finishes the call in flight (a tool call) and stops for the pause: nothing more is asked while paused.
    await played.next('half a plan', [{ id: 'c-1', name: 'missing_tool', arguments: '{}' }]);
    await bus.settled();
    expect(played.asked).toHaveLength(1);
    expect(await control('task-p', { action: 'resume', by: 'bob' })).toMatchObject({ outcome: 'resumed' });
    await played.next('the plan');
    await played.next('built');
    expect((await final('task-p'))?.kind).toBe('task.completed');
    expect(bus.eventsOf('task.paused')).toHaveLength(1);
    expect(agentMessages()).toEqual([]);
  });

  it('gives a told message to the step at work, read once: the next step is not given it again', async () => {
    const played = playedModel();
    const { intake, control, final, bus, clock } = await world({ model: played.model });
    intake.deliver({ id: 'task-t', goal: 'build it' });
    await expect.poll(() => played.asked.length).toBe(1);
    clock.advance(10);
    expect(await control('task-t', { action: 'tell', text: 'use the blue bucket' })).toMatchObject({
      ok: true,
    });
    await bus.settled();
    // Time goes on: a step sent in the same millisecond as the tell would be given it from the host's memory.
    clock.advance(10);
    await played.next('thinking', [{ id: 'c-1', name: 'missing_tool', arguments: '{}' }]);
    await played.next('the plan');
    await played.next('built');
    expect((await final('task-t'))?.kind).toBe('task.completed');
    const saying = played.asked.map(({ request }) =>
      request.messages.some((m) => m.content.includes('use the blue bucket')),
    );
    // The planner read it in its second call, once: the builder is not told it again (the task's history has it).
    expect(saying.slice(0, 2)).toEqual([false, true]);
    expect(bus.eventsOf('agent.told').map((e) => e.data.stepId)).toEqual(['task-t.plan.1']);
  });

  it('stops the run in this process at once when the task is cancelled', async () => {
    const played = playedModel();
    const { intake, control, final } = await world({ model: played.model });
    intake.deliver({ id: 'task-c', goal: 'build it' });
    await expect.poll(() => played.asked.length).toBe(1);
    expect(await control('task-c', { action: 'cancel' })).toMatchObject({ ok: true });
    expect((await final('task-c'))?.kind).toBe('task.cancelled');
    await expect.poll(() => played.aborted.length).toBe(1);
  });

  it('fails a step that runs past its time limit as step_timeout, as over the bus', async () => {
    const played = playedModel();
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
    const { intake, final, clock, bus } = await world({ config, model: played.model });
    intake.deliver({ id: 'task-o', goal: 'plan it' });
    await expect.poll(() => played.asked.length).toBe(1);
    clock.advance(61_000);
    await bus.settled();
    const ended = await final('task-o');
    expect(ended?.kind).toBe('task.failed');
    expect(JSON.stringify(ended?.data)).toContain('timeout');
    await expect.poll(() => played.aborted.length).toBe(1);
  });

  it('ends the task when it goes over its token budget', async () => {
    const config = pipeline(
      [
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'build', kind: 'agent', agent: 'builder' },
      ],
      { budget: { maxTokens: 5 } },
    );
    const { intake, final, agentMessages } = await world({ config });
    intake.deliver({ id: 'task-b', goal: 'plan it' });
    const ended = await final('task-b');
    expect(ended?.kind).toBe('task.failed');
    expect(JSON.stringify(ended?.data)).toContain('budget');
    expect(agentMessages()).toEqual([]);
  });

  it('refuses a tool call its rules deny, runs nothing, and tells the model so', async () => {
    const ran: unknown[] = [];
    const registry = new ToolRegistry();
    registry.register({
      name: 'note',
      description: 'Notes something.',
      input: z.object({ text: z.string() }),
      run: async (input) => {
        ran.push(input);
        return 'noted';
      },
    });
    const played = playedModel();
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
    const { intake, final, bus, agentMessages } = await world({
      config,
      model: played.model,
      registry,
      rules: [{ tool: 'note', decision: 'deny' }],
    });
    intake.deliver({ id: 'task-d', goal: 'plan it' });
    await played.next('noting', [{ id: 'c-1', name: 'note', arguments: '{"text":"x"}' }]);
    await played.next('planned without notes');
    expect((await final('task-d'))?.kind).toBe('task.completed');
    expect(ran).toEqual([]);
    expect(bus.eventsOf('tool.result').map((e) => e.data.ok)).toEqual([false]);
    expect(agentMessages()).toEqual([]);
  });

  it('sends a step over the bus, to another host, when the one here is full', async () => {
    const mine = playedModel();
    const theirs = playedModel();
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
    const { intake, final, agentMessages } = await world({
      config,
      model: mine.model,
      maxLocalSteps: 1,
      second: theirs.model,
    });
    intake.deliver({ id: 'task-1', goal: 'plan one' });
    await expect.poll(() => mine.asked.length).toBe(1);
    intake.deliver({ id: 'task-2', goal: 'plan two' });
    await expect.poll(() => theirs.asked.length).toBe(1);
    expect(agentMessages().map((m) => JSON.parse(m.data).taskId)).toEqual(['task-2']);
    await mine.next('one planned');
    await theirs.next('two planned');
    expect((await final('task-1'))?.kind).toBe('task.completed');
    expect((await final('task-2'))?.kind).toBe('task.completed');
  });

  it('sends a step that went over the bus again over the bus after a reconnect, though the host here has room now', async () => {
    const mine = playedModel();
    const theirs = playedModel();
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
    const { intake, final, agentMessages, bus } = await world({
      config,
      model: mine.model,
      maxLocalSteps: 1,
      second: theirs.model,
    });
    intake.deliver({ id: 'task-1', goal: 'plan one' });
    await expect.poll(() => mine.asked.length).toBe(1);
    intake.deliver({ id: 'task-2', goal: 'plan two' });
    await expect.poll(() => theirs.asked.length).toBe(1);
    await mine.next('one planned');
    expect((await final('task-1'))?.kind).toBe('task.completed');
    // The reply of task-2's step may have been lost to the reconnect: the step is sent again on the bus, whose queue
    // group may give it to the host running it (which joins it to that run), not to a second run here for certain.
    bus.emitStatus('reconnect');
    await expect
      .poll(() => agentMessages().map((m) => JSON.parse(m.data).stepId))
      .toEqual(['task-2.plan.1', 'task-2.plan.1']);
    // The in-memory bus's queue group takes turns: this resend reached the host here over the bus.
    await mine.next('two planned');
    expect((await final('task-2'))?.kind).toBe('task.completed');
  });
});
