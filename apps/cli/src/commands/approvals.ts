import { hostname, userInfo } from 'node:os';
import { endingOfRecord } from '@troupe/coordinator';
import {
  ApprovalDecision,
  BUCKETS,
  DecisionReceipt,
  formatIssues,
  HumanAnswer,
  HumanRequest,
  subjects,
  type TaskEnding,
} from '@troupe/protocol';
import { closedByEnding, describeEnding, type NatsBus, TransportError } from '@troupe/runtime';
import type { z } from 'zod';
import { openOrExplain } from '../kvBuckets.ts';
import { CliError, connectCli, type ServerOptions } from '../server.ts';
import { workflowsIfAny } from '../workflowRecords.ts';

export interface ApprovalsOptions extends ServerOptions {
  all: boolean;
  json: boolean;
}

/** `troupe approvals`: what people are being asked now (approvals and questions), oldest first. */
export async function listApprovals(options: ApprovalsOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-approvals');
  try {
    const store = await openOrExplain(bus, BUCKETS.approvals, HumanRequest);
    const records: HumanRequest[] = [];
    for (const key of await store.keys()) {
      const entry = await store.get(key);
      if (entry && (options.all || entry.value.status === 'pending')) records.push(entry.value);
    }
    records.sort((a, b) => a.requestedAt.localeCompare(b.requestedAt));
    if (options.json) {
      for (const record of records) process.stdout.write(`${JSON.stringify(record)}\n`);
      return 0;
    }
    if (records.length === 0) {
      process.stdout.write(options.all ? 'nothing has been asked\n' : 'nothing is waiting for a person\n');
      return 0;
    }
    for (const r of records) process.stdout.write(`${describe(r)}\n`);
    return 0;
  } finally {
    await bus.close();
  }
}

function describe(r: HumanRequest): string {
  const what = r.kind === 'approval' ? `${r.tool} ${r.arguments ?? ''} — ${r.prompt}` : `asks: ${r.prompt}`;
  const state =
    r.status === 'pending'
      ? `expires ${r.expiresAt}`
      : r.status === 'closed' && r.taskEnded
        ? `closed: task ${describeEnding(r.taskEnded)}`
        : `${r.status}${r.by ? ` by ${r.by}` : ''}`;
  return `${r.id}  ${r.kind.padEnd(8)}  ${r.pipeline}/${r.taskId}  ${r.agent}  ${what}  (${state})`;
}

export interface DecideOptions extends ServerOptions {
  reason?: string;
  by?: string;
}

/** `troupe approve` / `troupe deny`: decides one pending approval, and says whether it reached the waiting call. */
export async function decide(
  id: string,
  decision: 'allow' | 'deny',
  options: DecideOptions,
): Promise<number> {
  if (decision === 'deny' && !options.reason)
    throw new CliError('troupe deny needs --reason: the agent is told why', 2);
  const payload = valid(ApprovalDecision, {
    decision,
    ...(options.reason ? { reason: options.reason } : {}),
    by: options.by ?? whoAmI(),
  });
  return reply(id, 'approval', payload, options);
}

/** `troupe answer`: answers an agent's question. */
export async function answer(id: string, text: string, options: DecideOptions): Promise<number> {
  const payload = valid(HumanAnswer, { answer: text, by: options.by ?? whoAmI() });
  return reply(id, 'question', payload, options);
}

async function reply(
  id: string,
  kind: HumanRequest['kind'],
  payload: unknown,
  options: ServerOptions,
): Promise<number> {
  const bus = await connectCli(options, 'troupe-decide');
  try {
    const store = await openOrExplain(bus, BUCKETS.approvals, HumanRequest);
    const entry = await store.get(id);
    const record = entry?.value;
    if (!entry || !record)
      throw new CliError(`no ${kind} named ${id}; \`troupe approvals\` lists what is pending`);
    if (record.kind !== kind) {
      throw new CliError(
        `${id} is ${record.kind === 'question' ? 'a question: use troupe answer' : 'an approval: use troupe approve or troupe deny'}`,
        2,
      );
    }
    if (record.status === 'closed') {
      const how = record.taskEnded ? describeEnding(record.taskEnded) : 'ended';
      throw new CliError(
        `${id}: task ${record.taskId} has ended: ${how}; nothing waits for it, nothing changed`,
      );
    }
    if (record.status !== 'pending' && record.status !== 'expired') {
      throw new CliError(
        `${id} was already ${record.status}${record.by ? ` by ${record.by}` : ''}; nothing changed`,
      );
    }
    // The task may have ended while the request waited (its record not yet closed): say how, change nothing.
    const ended = await taskEnding(bus, record.taskId);
    if (ended !== undefined) {
      if (record.status === 'pending')
        await store.update(id, closedByEnding(record, ended, Date.now()), entry.revision);
      throw new CliError(
        `${id}: task ${record.taskId} has ended: ${describeEnding(ended)}; nothing waits for it, nothing changed`,
      );
    }
    if (record.status === 'expired') throw new CliError(`${id} was already expired; nothing changed`);
    try {
      const receipt = await bus.request(subjects.approval(record.taskId, id), payload, DecisionReceipt, {
        timeoutMs: 10_000,
        meta: { taskId: record.taskId, from: 'human', to: record.agent, kind },
      });
      process.stdout.write(`${id}: ${receipt.outcome} (task ${record.taskId}, agent ${record.agent})\n`);
      return 0;
    } catch (error) {
      if (!(error instanceof TransportError && error.code === 'no_responders'))
        throw new CliError(`${id}: ${(error as Error).message}`);
    }
    // Nothing waits on it now (its process died or is restarting): record the decision in KV, where the step
    // finds it when it resumes. Only a still-pending record is changed, so one decision wins.
    if (Date.parse(record.expiresAt) <= Date.now()) {
      throw new CliError(`${id} expired at ${record.expiresAt}; nothing changed`);
    }
    const decided = decidedRecord(record, payload);
    if ((await store.update(id, decided, entry.revision)) === undefined) {
      const now = (await store.get(id))?.value;
      throw new CliError(`${id} was decided meanwhile (${now?.status ?? 'gone'}); nothing changed`);
    }
    process.stdout.write(
      `${id}: ${decided.status}, recorded (task ${record.taskId}, agent ${record.agent}); nothing waits on it right now, so it is applied when the task resumes\n`,
    );
    return 0;
  } finally {
    await bus.close();
  }
}

/** The record with a person's decision or answer, as the waiting step would have stored it. */
function decidedRecord(record: HumanRequest, payload: unknown): HumanRequest {
  const value = payload as { decision?: 'allow' | 'deny'; answer?: string; reason?: string; by?: string };
  return {
    ...record,
    status: record.kind === 'question' ? 'answered' : value.decision === 'allow' ? 'allowed' : 'denied',
    decidedAt: new Date().toISOString(),
    ...(value.by === undefined ? {} : { by: value.by }),
    ...(value.reason === undefined ? {} : { reason: value.reason }),
    ...(value.answer === undefined ? {} : { answer: value.answer }),
  };
}

/** How the task ended, from its record in `workflows`; undefined while it runs (or when nothing is known). */
async function taskEnding(bus: NatsBus, taskId: string): Promise<TaskEnding | undefined> {
  const workflows = await workflowsIfAny(bus).catch(() => undefined);
  const record = (await workflows?.get(taskId))?.value;
  return record === undefined ? undefined : endingOfRecord(record);
}

const whoAmI = (): string => `${userInfo().username}@${hostname()}`;

/** The payload, or a usage error naming what is wrong with it. */
function valid<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const problems = formatIssues(parsed.error.issues).map((i) => `${i.path || 'value'}: ${i.message}`);
  throw new CliError(problems.join('; '), 2);
}
