import {
  type ControlReceipt,
  type ControlRefusal,
  type ErrorReply,
  endingOfRecord,
  isTaskId,
  subjects,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type Bus, type BusSubscription, describeEnding, throughOutages } from '@troupe/runtime';
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
 */
export function startControlResponder(options: ControlResponderOptions): BusSubscription {
  const { bus, store } = options;
  const graceMs = options.ownerGraceMs ?? DEFAULT_OWNER_GRACE_MS;
  // Read as text: a malformed control message is reported by the coordinators' own subscription.
  return bus.subscribeText(
    subjects.allControl,
    async (delivery) => {
      if (delivery.reply === undefined) return;
      const taskId = delivery.subject.slice(subjects.control('').length);
      // Not a task id (the subject's token can be anything): no task has it, and no lookup is needed to say so.
      if (!isTaskId(taskId)) return delivery.respond(refusal('unknown_task', `no task ${taskId} is known`));
      if (options.runsHere(taskId)) return;
      const first = await record(taskId);
      if (first === undefined) return delivery.respond(refusal('unknown_task', `no task ${taskId} is known`));
      if (first.status !== 'running') return delivery.respond(ended(first));
      // The coordinator running it (in another process) answers at once; give it the time to.
      await new Promise((resolve) => setTimeout(resolve, graceMs));
      const now = (await record(taskId)) ?? first;
      const action = actionOf(delivery.value);
      const migrating = action === 'migrate';
      if (now.status === 'cancelled' && action === 'cancel') {
        return delivery.respond({ ok: true, taskId, outcome: 'cancelled' } satisfies ControlReceipt);
      }
      if (now.status !== 'running') return delivery.respond(ended(now));
      return delivery.respond(
        refusal(
          'not_running',
          `task ${taskId} has not ended (it is at ${now.state}, round ${now.round}) but no coordinator runs it right now; ` +
            'it resumes when its message is delivered again (within the ack wait); nothing was changed' +
            (now.paused
              ? `; it is paused (since ${now.paused.since}) and stays paused when it resumes`
              : '') +
            (migrating || isSteering(action) ? `; ${AFTER[migrating ? 'migrate' : 'steer']}` : ''),
        ),
      );
    },
    { queue: 'troupe-control', reporter: 'coordinator', meta: () => ({ kind: 'control' }) },
  );

  async function record(taskId: string): Promise<WorkflowRecord | undefined> {
    return (await throughOutages(() => store.get(taskId)))?.value;
  }
}

/** What a sender of a control message only the running coordinator carries out is told to do. */
const AFTER = {
  migrate: 'a task is migrated by the coordinator running it, so try again once it runs',
  steer: 'a task is paused, resumed and told by the coordinator running it, so try again once it runs',
} as const;

/** A pause, resume or tell: carried out only by the coordinator running the task. */
const isSteering = (action: unknown): boolean =>
  action === 'pause' || action === 'resume' || action === 'tell';

/** The action a control message asks for, read leniently: the coordinators' own subscription reports a bad one. */
function actionOf(text: string): unknown {
  try {
    return (JSON.parse(text) as { action?: unknown } | null)?.action;
  } catch {
    return undefined;
  }
}

function ended(record: WorkflowRecord): ErrorReply {
  const ending = endingOfRecord(record);
  const how = ending === undefined ? record.status : describeEnding(ending);
  return refusal('task_ended', `task ${record.taskId} has already ended: ${how}; nothing was changed`);
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}
