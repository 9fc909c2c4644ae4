import type { AgentStepRequest, ToldMessage } from '@troupe/protocol';
import type { Clock } from '../events/clock.ts';

/**
 * How much steering a host keeps, and for how long. A request is on its way for milliseconds; it may wait longer
 * here for another version's agent to load (a KV read, up to about 10 s through an outage) or for an earlier run of
 * the same step to unwind. After three missed heartbeats (15 s at the default 5 s) the workflow sends the step again,
 * with a new `sentAt`, so steering a minute old concerns no request still on its way. Steering is rare (people do
 * it): 1,000 tasks is far more than a minute brings, 100 messages a task is what the coordinator keeps unread
 * (`told_backlog`), and 1 MiB of text in all keeps the worst case small. What is dropped past these bounds is what a
 * host did before it kept any: the task is held before its next step, and the message goes to the next step.
 */
export const RECENT_STEERING_LIMITS = {
  tasks: 1_000,
  messagesPerTask: 100,
  textBytes: 1024 * 1024,
  ageMs: 60_000,
} as const;

export type RecentSteeringLimits = { [K in keyof typeof RECENT_STEERING_LIMITS]: number };

/** What a step missed of its task's steering while its request was on its way: apply it as the step starts. */
export interface MissedSteering {
  /** A pause began at or after the request was sent, and no resume of it was heard. */
  paused: boolean;
  /** Messages told at or after the request was sent that it does not carry, oldest first. */
  told: ToldMessage[];
}

interface HeardMessage {
  message: ToldMessage;
  /** When it was told (ms, the coordinator's clock), to compare with a request's `sentAt`. */
  toldAt: number;
  /** When this host heard it (its own clock), for the age bound. */
  heardAt: number;
  bytes: number;
}

interface TaskSteering {
  /** The task's pause in force as heard: when it began (the coordinator's clock) and when it was heard here. */
  pause?: { since: number; heardAt: number };
  told: HeardMessage[];
  /** When anything of the task was last heard here: tasks are kept in this order, oldest first. */
  heardAt: number;
}

/**
 * The steering of each task of the pipeline a host heard lately (`task.paused`, `task.resumed` after a pause,
 * `task.told`), so a step whose request was on its way when it was published is told it as it starts. Without it a
 * pause or a message that reached the host before the step did was heard by no step. Bounded in count and age
 * ({@link RECENT_STEERING_LIMITS}); a request without `sentAt` (an older coordinator's) is given nothing.
 */
export class RecentSteering {
  readonly #tasks = new Map<string, TaskSteering>();
  readonly #clock: Pick<Clock, 'now'>;
  readonly #limits: RecentSteeringLimits;
  #textBytes = 0;

  constructor(clock: Pick<Clock, 'now'>, limits: RecentSteeringLimits = RECENT_STEERING_LIMITS) {
    this.#clock = clock;
    this.#limits = limits;
  }

  /** Tasks whose steering is kept now. */
  get size(): number {
    return this.#tasks.size;
  }

  /** The task was paused; the pause began at `since`. */
  paused(taskId: string, since: number): void {
    const now = this.#clock.now();
    this.#touch(taskId, now).pause = { since, heardAt: now };
    this.#prune(now);
  }

  /** The task was resumed after the pause that began at `since` (unknown: whichever is in force). */
  resumed(taskId: string, since: number | undefined): void {
    const task = this.#tasks.get(taskId);
    if (task?.pause === undefined) return;
    // A resume of an earlier pause, heard late, leaves a later one in force.
    if (since === undefined || since >= task.pause.since) delete task.pause;
    this.#prune(this.#clock.now());
  }

  /** A person told the task `message`; its `at` says when. A message heard again (a redelivery) is kept once. */
  told(taskId: string, message: ToldMessage): void {
    const now = this.#clock.now();
    const task = this.#aged(this.#touch(taskId, now), now);
    if (task.told.some((heard) => heard.message.id === message.id)) return;
    const bytes = Buffer.byteLength(message.text, 'utf8');
    task.told.push({ message, toldAt: Date.parse(message.at), heardAt: now, bytes });
    this.#textBytes += bytes;
    while (task.told.length > this.#limits.messagesPerTask) this.#dropMessage(task);
    this.#prune(now);
  }

  /** The task has ended: nothing of it is wanted any more. */
  forget(taskId: string): void {
    const task = this.#tasks.get(taskId);
    if (task) this.#drop(taskId, task);
  }

  /** What a step of this request missed while it was on its way; undefined when nothing (or no `sentAt`). */
  missedBy(request: AgentStepRequest): MissedSteering | undefined {
    const { sentAt } = request;
    if (sentAt === undefined) return undefined;
    const now = this.#clock.now();
    this.#prune(now);
    const found = this.#tasks.get(request.taskId);
    if (found === undefined) return undefined;
    const task = this.#aged(found, now);
    const carried = new Set(request.told?.map((message) => message.id));
    const paused = task.pause !== undefined && task.pause.since >= sentAt;
    const told = task.told
      .filter((heard) => heard.toldAt >= sentAt && !carried.has(heard.message.id))
      .map((heard) => heard.message);
    return paused || told.length > 0 ? { paused, told } : undefined;
  }

  /** The task's entry, moved to the end (the most lately heard). */
  #touch(taskId: string, now: number): TaskSteering {
    const task = this.#tasks.get(taskId) ?? { told: [], heardAt: now };
    this.#tasks.delete(taskId);
    task.heardAt = now;
    this.#tasks.set(taskId, task);
    return task;
  }

  /**
   * Drops the tasks last heard before the age bound, then the least lately heard ones while a count bound is passed;
   * only the oldest are looked at, so a step's start costs next to nothing. A task heard lately may still hold an
   * older pause or messages: {@link #aged} drops those when the task is read or written.
   */
  #prune(now: number): void {
    const oldest = now - this.#limits.ageMs;
    for (const [taskId, task] of this.#tasks) {
      const over = this.#tasks.size > this.#limits.tasks || this.#textBytes > this.#limits.textBytes;
      if (task.heardAt > oldest && !over) break;
      this.#drop(taskId, task);
    }
  }

  /** The task, without what of it is older than the age bound. */
  #aged(task: TaskSteering, now: number): TaskSteering {
    const oldest = now - this.#limits.ageMs;
    if (task.pause !== undefined && task.pause.heardAt <= oldest) delete task.pause;
    while ((task.told[0]?.heardAt ?? now) <= oldest) this.#dropMessage(task);
    return task;
  }

  #dropMessage(task: TaskSteering): void {
    const dropped = task.told.shift();
    if (dropped) this.#textBytes -= dropped.bytes;
  }

  #drop(taskId: string, task: TaskSteering): void {
    for (const heard of task.told) this.#textBytes -= heard.bytes;
    this.#tasks.delete(taskId);
  }
}
