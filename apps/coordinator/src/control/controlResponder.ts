import {
  type ControlReceipt,
  type ControlRefusal,
  type ErrorReply,
  endingOfRecord,
  isTaskId,
  parseSubject,
  subjects,
  type WorkflowRecord,
} from '@troupe/protocol';
import {
  type Bus,
  type BusSubscription,
  type Delivery,
  describeEnding,
  throughOutages,
} from '@troupe/runtime';
import type { WorkflowStore } from '../task/taskServices.ts';

export interface ControlResponderOptions {
  bus: Bus;
  store: Pick<WorkflowStore, 'get'>;
  /** Whether this process runs the task: then its runner answers, not the responder. */
  runsHere(taskId: string): boolean;
  /** How long a running task's own coordinator has to answer before the responder says nobody runs it. */
  ownerGraceMs?: number;
}

const DEFAULT_OWNER_GRACE_MS = 1_000;

/**
 * Answers control messages for tasks no coordinator runs, so a sender never waits for a timeout: one member of the
 * queue group `troupe-control` (across every coordinator) reads the task's record and says what it knows — no such
 * task, the task already ended (and how), or it has not ended but nobody runs it right now. A task some coordinator
 * runs is answered by that coordinator (`cancelled`, `migrated`, or why not); the responder stays silent for it.
 * It answers on `troupe.control.<taskId>` and on a pipeline's steering subjects, `troupe.steer.<pipeline>.<taskId>`
 * (a pause, resume or tell only; a task of another pipeline is unknown there).
 */
export function startControlResponder(options: ControlResponderOptions): BusSubscription {
  const { bus, store } = options;
  const graceMs = options.ownerGraceMs ?? DEFAULT_OWNER_GRACE_MS;

  const answer = async (delivery: Delivery<string>, steering?: { pipeline: string }) => {
    if (delivery.reply === undefined) return;
    const taskId = delivery.subject.slice(delivery.subject.lastIndexOf('.') + 1);
    // Not a task id (the subject's token can be anything): no task has it, and no lookup is needed to say so.
    if (!isTaskId(taskId)) return delivery.respond(refusal('unknown_task', `no task ${taskId} is known`));
    if (steering && !STEERING_ACTIONS.has(actionOf(delivery.value))) {
      return delivery.respond(notSteering(taskId, steering.pipeline));
    }
    // A steering subject names the pipeline: a task of another is none of its (permissions are granted by pipeline),
    // so its record is read first, even for a task run here, whose runner hears only its own pipeline's subject.
    const named = steering ? await record(taskId) : undefined;
    if (steering && named?.pipeline !== steering.pipeline) {
      return delivery.respond(refusal('unknown_task', `no task ${taskId} is known`));
    }
    if (options.runsHere(taskId)) return;
    const first = named ?? (await record(taskId));
    if (first === undefined) return delivery.respond(refusal('unknown_task', `no task ${taskId} is known`));
    if (first.status !== 'running') return delivery.respond(ended(first));
    // The coordinator running it (in another process) answers at once; give it the time to.
    await new Promise((resolve) => setTimeout(resolve, graceMs));
    const now = (await record(taskId)) ?? first;
    const action = actionOf(delivery.value);
    const migrating = action === 'migrate';
    // Only a cancel is answered by a cancellation that came first: a pause, resume or tell of it changed nothing.
    if (now.status === 'cancelled' && action === 'cancel') {
      return delivery.respond({ ok: true, taskId, outcome: 'cancelled' } satisfies ControlReceipt);
    }
    if (now.status !== 'running') return delivery.respond(ended(now));
    return delivery.respond(
      refusal(
        'not_running',
        `task ${taskId} has not ended (it is at ${now.state}, round ${now.round}) but no coordinator runs it right now; ` +
          'it resumes when its message is delivered again (within the ack wait); nothing was changed' +
          (now.paused ? `; it is paused (since ${now.paused.since}) and stays paused when it resumes` : '') +
          (migrating || STEERING_ACTIONS.has(action) ? `; ${AFTER[migrating ? 'migrate' : 'steer']}` : ''),
      ),
    );
  };

  // Read as text: a malformed control message is reported by the coordinators' own subscription.
  const control = bus.subscribeText(subjects.allControl, (delivery) => answer(delivery), {
    queue: 'troupe-control',
    reporter: 'coordinator',
    meta: () => ({ kind: 'control' }),
  });
  const steer = bus.subscribeText(
    subjects.allSteer,
    (delivery) => {
      const parsed = parseSubject(delivery.subject);
      return answer(delivery, { pipeline: parsed?.type === 'steer' ? parsed.pipeline : '' });
    },
    { queue: 'troupe-control', reporter: 'coordinator', meta: () => ({ kind: 'steer' }) },
  );
  return {
    unsubscribe: () => {
      control.unsubscribe();
      steer.unsubscribe();
    },
    closed: Promise.all([control.closed, steer.closed]).then(() => undefined),
  };

  async function record(taskId: string): Promise<WorkflowRecord | undefined> {
    return (await throughOutages(() => store.get(taskId)))?.value;
  }
}

/** The action a control message asks for, read leniently: the coordinators' own subscription reports a bad one. */
function actionOf(text: string): unknown {
  try {
    return (JSON.parse(text) as { action?: unknown } | null)?.action;
  } catch {
    return undefined;
  }
}

/** What the sender of a control message only the running coordinator carries out is told to do. */
const AFTER = {
  migrate: 'a task is migrated by the coordinator running it, so try again once it runs',
  steer: 'a task is paused, resumed and told by the coordinator running it, so try again once it runs',
} as const;

/** What a steering subject takes: a person's pause, resume or tell, never a cancel or a migration. */
const STEERING_ACTIONS = new Set<unknown>(['pause', 'resume', 'tell']);

/**
 * The answer to a cancel or migration sent on a steering subject: those go on `troupe.control.<taskId>`, which NATS
 * permissions grant to fewer users (they cannot tell one pipeline's tasks from another's there).
 */
export function notSteering(taskId: string, pipeline: string): ErrorReply {
  return {
    ok: false,
    error: {
      code: 'invalid_request',
      message:
        `${subjects.steer(pipeline, taskId)} takes only pause, resume and tell; a cancel or a migration goes on ` +
        `${subjects.control(taskId)}; nothing was changed`,
    },
  };
}

function ended(record: WorkflowRecord): ErrorReply {
  const ending = endingOfRecord(record);
  const how = ending === undefined ? record.status : describeEnding(ending);
  return refusal('task_ended', `task ${record.taskId} has already ended: ${how}; nothing was changed`);
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}
