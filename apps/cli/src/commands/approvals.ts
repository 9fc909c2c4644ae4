import { hostname, userInfo } from 'node:os';
import { listHumanRequests, OperationError, replyToHuman } from '@troupe/client';
import {
  ApprovalDecision,
  HumanAnswer,
  type HumanRequest,
  type ParseResult,
  validateMessage,
} from '@troupe/protocol';
import { describeEnding } from '@troupe/runtime';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';

/** `pipelines`: only theirs (a user whose NATS permissions cover only those). */
export interface ScopeOptions extends ServerOptions {
  pipelines?: string[];
}

export interface ApprovalsOptions extends ScopeOptions {
  all: boolean;
  json: boolean;
}

/** `troupe approvals`: what people are being asked now (approvals and questions), oldest first. */
export async function listApprovals(options: ApprovalsOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-approvals');
  try {
    const records = await listHumanRequests(bus, { all: options.all, pipelines: options.pipelines }).catch(
      explain,
    );
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
      ? r.held
        ? `held: task paused since ${r.held.since}, ${Math.round(r.held.leftMs / 1000)} s left on resume`
        : `expires ${r.expiresAt}`
      : r.status === 'closed' && r.taskEnded
        ? `closed: task ${describeEnding(r.taskEnded)}`
        : `${r.status}${r.by ? ` by ${r.by}` : ''}`;
  return `${r.id}  ${r.kind.padEnd(8)}  ${r.pipeline}/${r.taskId}  ${r.agent}  ${what}  (${state})`;
}

export interface DecideOptions extends ScopeOptions {
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
    throw new CliError(
      'troupe deny needs a reason, the agent is told why: troupe deny <approval-id> "<reason>"',
      2,
    );
  const payload = valid(
    validateMessage(ApprovalDecision, {
      decision,
      ...(options.reason ? { reason: options.reason } : {}),
      by: options.by ?? whoAmI(),
    }),
  );
  return reply(id, 'approval', payload, options);
}

/** `troupe answer`: answers an agent's question. */
export async function answer(id: string, text: string, options: DecideOptions): Promise<number> {
  const payload = valid(validateMessage(HumanAnswer, { answer: text, by: options.by ?? whoAmI() }));
  return reply(id, 'question', payload, options);
}

async function reply(
  id: string,
  kind: HumanRequest['kind'],
  payload: unknown,
  options: ScopeOptions,
): Promise<number> {
  const bus = await connectCli(options, 'troupe-decide');
  try {
    const result = await replyToHuman(
      bus,
      id,
      kind === 'approval'
        ? { kind, decision: payload as ApprovalDecision }
        : { kind, answer: payload as HumanAnswer },
      { pipelines: options.pipelines },
    );
    const { taskId, agent } = result.request;
    process.stdout.write(
      `${id}: ${result.status} (task ${taskId}, agent ${agent}); the step waiting on it goes on, or takes it when its task resumes\n`,
    );
    return 0;
  } catch (error) {
    if (OperationError.is(error, 'not_found'))
      throw new CliError(`${error.message}; \`troupe approvals\` lists what is pending`);
    if (OperationError.is(error, 'wrong_kind')) {
      throw new CliError(
        `${error.message}: use ${kind === 'approval' ? 'troupe answer' : 'troupe approve or troupe deny'}`,
        2,
      );
    }
    if (error instanceof OperationError) throw new CliError(error.message);
    throw error;
  } finally {
    await bus.close();
  }
}

const whoAmI = (): string => `${userInfo().username}@${hostname()}`;

/** The payload, or a usage error naming what is wrong with it. */
function valid<T>(parsed: ParseResult<T>): T {
  if (parsed.ok) return parsed.value;
  const problems = parsed.issues.map((i) => `${i.path || 'value'}: ${i.message}`);
  throw new CliError(problems.join('; '), 2);
}
