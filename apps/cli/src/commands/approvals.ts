import { hostname, userInfo } from 'node:os';
import {
  ApprovalDecision,
  BUCKETS,
  DecisionReceipt,
  formatIssues,
  HumanAnswer,
  HumanRequest,
  subjects,
} from '@troupe/protocol';
import { KvStore, type NatsBus, TransportError } from '@troupe/runtime';
import type { z } from 'zod';
import { CliError, connectCli, type ServerOptions } from '../server.ts';

export interface ApprovalsOptions extends ServerOptions {
  all: boolean;
  json: boolean;
}

/** `troupe approvals`: what people are being asked now (approvals and questions), oldest first. */
export async function listApprovals(options: ApprovalsOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-approvals');
  try {
    const store = await openStore(bus);
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
  const state = r.status === 'pending' ? `expires ${r.expiresAt}` : `${r.status}${r.by ? ` by ${r.by}` : ''}`;
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
    const record = (await (await openStore(bus)).get(id))?.value;
    if (!record) throw new CliError(`no ${kind} named ${id}; \`troupe approvals\` lists what is pending`);
    if (record.kind !== kind) {
      throw new CliError(
        `${id} is ${record.kind === 'question' ? 'a question: use troupe answer' : 'an approval: use troupe approve or troupe deny'}`,
        2,
      );
    }
    if (record.status !== 'pending') {
      throw new CliError(
        `${id} was already ${record.status}${record.by ? ` by ${record.by}` : ''}; nothing changed`,
      );
    }
    try {
      const receipt = await bus.request(subjects.approval(record.taskId, id), payload, DecisionReceipt, {
        timeoutMs: 10_000,
        meta: { taskId: record.taskId, from: 'human', to: record.agent, kind },
      });
      process.stdout.write(`${id}: ${receipt.outcome} (task ${record.taskId}, agent ${record.agent})\n`);
      return 0;
    } catch (error) {
      if (error instanceof TransportError && error.code === 'no_responders') {
        throw new CliError(
          `nothing is waiting on ${id} now (its agent stopped, or it was just decided); it stays ${record.status} until it expires at ${record.expiresAt}`,
        );
      }
      throw new CliError(`${id}: ${(error as Error).message}`);
    }
  } finally {
    await bus.close();
  }
}

async function openStore(bus: NatsBus) {
  try {
    return await KvStore.open(bus, BUCKETS.approvals, HumanRequest);
  } catch (error) {
    throw new CliError(`no Troupe coordinator has run on this server yet (${(error as Error).message})`);
  }
}

const whoAmI = (): string => `${userInfo().username}@${hostname()}`;

/** The payload, or a usage error naming what is wrong with it. */
function valid<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const problems = formatIssues(parsed.error.issues).map((i) => `${i.path || 'value'}: ${i.message}`);
  throw new CliError(problems.join('; '), 2);
}
