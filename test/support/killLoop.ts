import { type ChildProcess, spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';

/** One long-running `troupe` process the loop keeps alive: what it runs, and its current incarnation. */
export interface Slot {
  readonly name: string;
  readonly args: readonly string[];
  /** Started, and not seen to exit yet. */
  child?: ChildProcess;
  /** The current incarnation has printed its ready line. */
  ready: boolean;
  /** How many times it was started again after an exit. */
  restarts: number;
}

/** One kill -9 the loop sent. */
export interface Kill {
  /** Milliseconds since the loop started. */
  atMs: number;
  slot: string;
  pid: number;
  /** Whether the process had printed its ready line: a kill during start-up tests the start, not the work. */
  wasReady: boolean;
}

/** An exit the loop did not cause: a process that crashed (or stopped) by itself. */
export interface UnexpectedExit {
  atMs: number;
  slot: string;
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface KillLoopOptions {
  /** `node <cli> …`: the built CLI's entry. */
  cli: string;
  env: NodeJS.ProcessEnv;
  cwd: string;
  slots: { name: string; args: string[]; ready: RegExp }[];
  /** Where each slot's output goes, one file per slot (`<name>.log`), every incarnation appended. */
  logDir: string;
  /** Picks the slot to kill: a number in [0, 1), from a seeded source so that a run can be replayed. */
  random: () => number;
}

/**
 * `troupe up` and `troupe worker` processes kept running: each that exits is started again at once, and
 * {@link KillLoop.killEvery} sends SIGKILL to one of them, chosen at random, on a fixed period, as a machine or a
 * process dying without a word would.
 */
export class KillLoop {
  readonly kills: Kill[] = [];
  readonly unexpectedExits: UnexpectedExit[] = [];
  readonly #options: KillLoopOptions;
  readonly #slots: (Slot & { readyPattern: RegExp })[];
  readonly #started = Date.now();
  /** Pids this loop killed, so their exits are not taken for crashes. */
  readonly #killed = new Set<number>();
  #timer: NodeJS.Timeout | undefined;
  #stopping = false;

  constructor(options: KillLoopOptions) {
    this.#options = options;
    this.#slots = options.slots.map((s) => ({
      name: s.name,
      args: s.args,
      ready: false,
      restarts: 0,
      readyPattern: s.ready,
    }));
  }

  /** Starts every slot's process; resolves once each has printed its ready line: the first, then the rest at once. */
  async start(): Promise<void> {
    const [first, ...rest] = this.#slots;
    if (first === undefined) return;
    // The first alone: a coordinator, it makes Troupe's streams and buckets, which a worker waits for.
    this.#spawn(first);
    await this.#whenReady(first, 60_000);
    for (const slot of rest) this.#spawn(slot);
    await Promise.all(rest.map((slot) => this.#whenReady(slot, 60_000)));
  }

  /** Kills one process at random every `periodMs`, until {@link stopKilling}. */
  killEvery(periodMs: number): void {
    this.#timer = setInterval(() => this.#killOne(), periodMs);
  }

  stopKilling(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Restarts after kills, all told. */
  restarts(): number {
    return this.#slots.reduce((n, s) => n + s.restarts, 0);
  }

  /** Resolves once every slot's current process is ready (after the kills stop, the drain runs with all up). */
  async allReady(timeoutMs: number): Promise<void> {
    await Promise.all(this.#slots.map((slot) => this.#whenReady(slot, timeoutMs)));
  }

  /** Kills every process (SIGKILL: nothing more is to be done) and waits for each to exit; none is restarted. */
  async stopAll(): Promise<void> {
    this.stopKilling();
    this.#stopping = true;
    await Promise.all(
      this.#slots.map(async (slot) => {
        const child = slot.child;
        if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }),
    );
  }

  #elapsed(): number {
    return Date.now() - this.#started;
  }

  #killOne(): void {
    // Any of them, up or still starting: preferring those up kills each one within a second of its start whenever it
    // is the only one up (a start takes seconds under load), and then no task gets anywhere.
    const slot = this.#slots[Math.floor(this.#options.random() * this.#slots.length)];
    const pid = slot?.child?.pid;
    if (slot === undefined || pid === undefined) return;
    this.#killed.add(pid);
    this.kills.push({ atMs: this.#elapsed(), slot: slot.name, pid, wasReady: slot.ready });
    this.#log(slot, `--- kill -9 ${pid} at ${this.#elapsed()} ms (ready: ${slot.ready})\n`);
    slot.child?.kill('SIGKILL');
  }

  #spawn(slot: Slot & { readyPattern: RegExp }): void {
    const { cli, env, cwd } = this.#options;
    const child = spawn(process.execPath, [cli, ...slot.args], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    slot.child = child;
    slot.ready = false;
    this.#log(slot, `--- start ${child.pid} at ${this.#elapsed()} ms\n`);
    let seen = '';
    const onData = (chunk: Buffer) => {
      const text = chunk.toString();
      this.#log(slot, text);
      if (slot.child !== child || slot.ready) return;
      // The ready line may arrive split across chunks: keep what could still be part of it.
      seen = (seen + text).slice(-4096);
      if (slot.readyPattern.test(seen)) slot.ready = true;
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code, signal) => {
      const pid = child.pid ?? -1;
      if (!this.#killed.delete(pid) && !this.#stopping) {
        this.unexpectedExits.push({ atMs: this.#elapsed(), slot: slot.name, pid, code, signal });
        this.#log(slot, `--- ${pid} exited by itself (code ${code}, signal ${signal})\n`);
      }
      if (this.#stopping || slot.child !== child) return;
      slot.restarts += 1;
      this.#spawn(slot);
    });
  }

  async #whenReady(slot: Slot, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!slot.ready) {
      if (Date.now() > deadline)
        throw new Error(`${slot.name} was not ready within ${timeoutMs} ms (see ${slot.name}.log)`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  #log(slot: Slot, text: string): void {
    appendFileSync(join(this.#options.logDir, `${slot.name}.log`), text);
  }
}
