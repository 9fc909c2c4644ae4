import {
  ApprovalDecision,
  endingOfRecord,
  HumanAnswer,
  type HumanRequest,
  isName,
  isTaskId,
  subjects,
  type TaskEnding,
  validateMessage,
} from '@troupe/protocol';
import { closedByEnding, describeEnding, type JetStreamBus, type KvEntry } from '@troupe/runtime/bus';
import { OperationError } from './operationError.ts';
import { type HumanRequestStore, openHumanRequests, openWorkflowStore, readValues } from './troupeState.ts';

/**
 * Which pipelines' requests a caller reads. Records are kept as `<pipeline>.<id>` in KV `approvals`; a user whose
 * NATS permissions cover only some pipelines (an approver made by `troupe nats-config`) names them, and only their
 * keys are read. Without `pipelines`, every pipeline's.
 */
export interface RequestScope {
  pipelines?: readonly string[] | undefined;
}

/** What people are asked now (approvals and questions), oldest first; every request ever asked with `all`. */
export async function listHumanRequests(
  bus: JetStreamBus,
  filter: { all?: boolean; taskId?: string } & RequestScope = {},
): Promise<HumanRequest[]> {
  const store = await openHumanRequests(bus);
  const keys = filter.pipelines
    ? (await Promise.all(filter.pipelines.filter(isName).map((p) => store.keys(`${p}.>`)))).flat()
    : await store.keys();
  return (await readValues(store, keys))
    .filter((r) => (filter.all || r.status === 'pending') && (!filter.taskId || r.taskId === filter.taskId))
    .sort((a, b) => a.requestedAt.localeCompare(b.requestedAt));
}

/** One approval or question by its id; undefined when there is none (an id no request could have included). */
export async function readHumanRequest(
  bus: JetStreamBus,
  id: string,
  scope: RequestScope = {},
): Promise<HumanRequest | undefined> {
  return (await findRequest(await openHumanRequests(bus), id, scope))?.value;
}

/** The record of request `id`, in whichever pipeline of the scope it was asked. */
async function findRequest(
  store: HumanRequestStore,
  id: string,
  scope: RequestScope,
): Promise<KvEntry<HumanRequest> | undefined> {
  if (!isTaskId(id)) return undefined;
  const keys = scope.pipelines
    ? scope.pipelines.filter(isName).map((p) => `${p}.${id}`)
    : await store.keys(`*.${id}`);
  for (const key of keys) {
    const entry = await store.get(key);
    if (entry?.value.id === id) return entry;
  }
  return undefined;
}

/** A person's decision on an approval, or answer to a question. */
export type HumanReply =
  | { kind: 'approval'; decision: ApprovalDecision }
  | { kind: 'question'; answer: HumanAnswer };

/** What became of a reply: recorded, with the request's status now (`allowed`, `denied` or `answered`). */
export interface ReplyOutcome {
  status: DecidedStatus;
  request: HumanRequest;
}

/** The status of a request a person replied to. */
export type DecidedStatus = 'allowed' | 'denied' | 'answered';

/**
 * Records a person's decision or answer on request `id`, then tells the step waiting on it, which takes it at once
 * (a step that is not waiting now finds it when its task resumes). Only a still-pending record is changed, so one
 * reply wins. The record is written here, not by the step, so nothing depends on the step's answer coming back:
 * with each role in a NATS account of its own, a worker's answer could not reach the person's account.
 * Throws an {@link OperationError} saying why nothing changed: no such request (`not_found`), the other kind
 * (`wrong_kind`), or one already decided, expired or whose task ended (`conflict`).
 */
export async function replyToHuman(
  bus: JetStreamBus,
  id: string,
  reply: HumanReply,
  options: RequestScope & { now?: () => number } = {},
): Promise<ReplyOutcome> {
  const { kind } = reply;
  const now = options.now ?? Date.now;
  // From a user's application the reply is untyped at run time: a bad one is refused with why, not a ZodError.
  const parsed =
    reply.kind === 'approval'
      ? validateMessage(ApprovalDecision, reply.decision)
      : validateMessage(HumanAnswer, reply.answer);
  if (!parsed.ok) {
    const what = reply.kind === 'approval' ? 'decision' : 'answer';
    throw new OperationError('invalid_request', parsed.reason.replace(/^payload/, `the ${what}`));
  }
  const payload = parsed.value;
  const store = await openHumanRequests(bus);
  // The asker writes a pending record too (held when its task is paused, a new expiresAt on resume): a reply that
  // lost to such a write is checked again against the record as it is now, not refused as decided meanwhile.
  for (let attempt = 1; ; attempt++) {
    const entry = await findRequest(store, id, options);
    const decided = await decidedOrRefused(bus, store, id, reply, payload, entry, now);
    if ((await store.update(decided.key, decided.record, decided.revision)) !== undefined) {
      // The waiting step also watches the record; this tells it now. Lost, it only delays the step by a few seconds.
      try {
        bus.publish(subjects.approval(decided.record.pipeline, decided.record.taskId, id), payload, {
          taskId: decided.record.taskId,
          from: 'human',
          to: decided.record.agent,
          kind,
        });
        await bus.flush();
      } catch {
        // Recorded: the step's watch of its record brings the decision.
      }
      return { status: decided.record.status, request: decided.record };
    }
    const current = (await store.get(decided.key))?.value;
    if (current?.status !== 'pending' || attempt >= MAX_REPLY_ATTEMPTS) {
      throw new OperationError(
        'conflict',
        `${id} was decided meanwhile (${current?.status ?? 'gone'}); nothing changed`,
      );
    }
  }
}

/** How often a reply is tried against a pending record its asker keeps writing (held, let go). */
const MAX_REPLY_ATTEMPTS = 5;

/**
 * The record `entry` with the reply recorded, to write over its revision; or the {@link OperationError} saying why the
 * reply changes nothing.
 */
async function decidedOrRefused(
  bus: JetStreamBus,
  store: HumanRequestStore,
  id: string,
  reply: HumanReply,
  payload: ApprovalDecision | HumanAnswer,
  entry: KvEntry<HumanRequest> | undefined,
  now: () => number,
): Promise<{ key: string; revision: number; record: HumanRequest & { status: DecidedStatus } }> {
  const { kind } = reply;
  const record = entry?.value;
  if (!entry || !record) throw new OperationError('not_found', `no ${kind} named ${id}`);
  if (record.kind !== kind) {
    throw new OperationError(
      'wrong_kind',
      `${id} is ${record.kind === 'question' ? 'a question' : 'an approval'}`,
    );
  }
  if (record.status === 'closed') {
    const how = record.taskEnded ? describeEnding(record.taskEnded) : 'ended';
    throw new OperationError(
      'conflict',
      `${id}: task ${record.taskId} has ended: ${how}; nothing waits for it, nothing changed`,
    );
  }
  if (record.status !== 'pending' && record.status !== 'expired') {
    throw new OperationError(
      'conflict',
      `${id} was already ${record.status}${record.by ? ` by ${record.by}` : ''}; nothing changed`,
    );
  }
  // The task may have ended while the request waited (its record not yet closed): say how, change nothing.
  const ended = await taskEnding(bus, record.taskId);
  if (ended !== undefined) {
    if (record.status === 'pending')
      await store.update(entry.key, closedByEnding(record, ended, now()), entry.revision);
    throw new OperationError(
      'conflict',
      `${id}: task ${record.taskId} has ended: ${describeEnding(ended)}; nothing waits for it, nothing changed`,
    );
  }
  if (record.status === 'expired')
    throw new OperationError('conflict', `${id} was already expired; nothing changed`);
  // A request held while its task is paused does not run out: its asker moves `expiresAt` on at the resume.
  if (record.held === undefined && Date.parse(record.expiresAt) <= now()) {
    throw new OperationError('conflict', `${id} expired at ${record.expiresAt}; nothing changed`);
  }
  return { key: entry.key, revision: entry.revision, record: decidedRecord(record, payload, now()) };
}

/** The record with a person's decision or answer, as the waiting step would have stored it. */
function decidedRecord(
  record: HumanRequest,
  payload: ApprovalDecision | HumanAnswer,
  at: number,
): HumanRequest & { status: DecidedStatus } {
  const value = payload as { decision?: 'allow' | 'deny'; answer?: string; reason?: string; by?: string };
  // Decided, nothing is left to run out or to hold: a record keeping `held` would say its task is paused for ever.
  const { held: _held, ...unheld } = record;
  return {
    ...unheld,
    status: record.kind === 'question' ? 'answered' : value.decision === 'allow' ? 'allowed' : 'denied',
    decidedAt: new Date(at).toISOString(),
    ...(value.by === undefined ? {} : { by: value.by }),
    ...(value.reason === undefined ? {} : { reason: value.reason }),
    ...(value.answer === undefined ? {} : { answer: value.answer }),
  };
}

/** How the task ended, from its record in `workflows`; undefined while it runs (or when nothing is known). */
async function taskEnding(bus: JetStreamBus, taskId: string): Promise<TaskEnding | undefined> {
  const store = await openWorkflowStore(bus).catch(() => undefined);
  const record = (await store?.get(taskId))?.value;
  return record === undefined ? undefined : endingOfRecord(record);
}
