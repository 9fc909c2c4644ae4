import {
  type EvalStore,
  mergeCases,
  OperationError,
  type RecordedSelect,
  readValues,
  recordedCases,
  type SkippedTask,
  workflowStoreIfAny,
} from '@troupe/client';
import type { JetStreamBus } from '@troupe/runtime/bus';
import { AuthRefusal, authorize, type Principal } from './auth.ts';
import type { AddedRuns, AddRunsBody } from './datasetRunsApi.ts';

/** Tasks a pipeline selection takes when the request names no limit, as `troupe eval dataset add --from-runs`. */
const DEFAULT_LIMIT = 50;

/**
 * `POST /v1/evals/datasets/{name}/cases`: the tasks chosen made cases (their recordings whole, as
 * `troupe eval dataset add` makes them) and stored as the dataset's next version — the previous version's cases and
 * scorers kept, a case of the same id replaced. Needs the submit scope and a token without a pipeline list: a
 * dataset may hold runs of any pipeline (and its size and versions say what others added), so only a token that may
 * read datasets writes them. Nothing is stored when no case could be made; the refusal says why, task by task.
 */
export async function addRunsToDataset(
  bus: JetStreamBus,
  store: EvalStore,
  who: Principal,
  name: string,
  body: AddRunsBody,
): Promise<AddedRuns> {
  authorize(who, 'submit');
  if (who.pipelines !== undefined) {
    throw new AuthRefusal(
      403,
      `token ${who.name} may touch only pipelines ${who.pipelines.join(', ')}; datasets may hold runs of any pipeline, so only a token without a pipeline list adds to them`,
    );
  }
  const select = selectionOf(body);
  const recorded = await recordedCases(bus, select);
  const skipped: SkippedTask[] = [...recorded.skipped];
  if (recorded.cases.length === 0) {
    throw new OperationError(
      'invalid_request',
      `nothing to add to dataset ${name}: ${await whyNone(bus, select, skipped)}; no version was stored`,
    );
  }
  // Made from the newest version, again from a newer one if another writer (another add, another gateway, the
  // CLI) stores one meanwhile: every add keeps its cases.
  let merged: ReturnType<typeof mergeCases> = { cases: [], added: 0, replaced: 0 };
  const { dataset, previous } = await store.addDataset(name, (previous) => {
    merged = mergeCases(previous?.cases ?? [], recorded.cases);
    const description = body.description ?? previous?.description;
    return {
      name,
      ...(description === undefined ? {} : { description }),
      scorers: previous?.scorers ?? [],
      cases: merged.cases,
    };
  });
  return {
    dataset: {
      name: dataset.name,
      version: dataset.version,
      createdAt: dataset.createdAt,
      cases: dataset.cases.length,
      recorded: dataset.cases.filter((c) => c.recording).length,
      ...(dataset.description === undefined ? {} : { description: dataset.description }),
    },
    ...(previous ? { previousVersion: previous.version } : {}),
    added: merged.added,
    replaced: merged.replaced,
    skipped,
  };
}

/** The tasks the body chooses, or a refusal saying what it lacks or mixes. */
function selectionOf(body: AddRunsBody): RecordedSelect & { taskIds?: string[] } {
  if (body.taskIds !== undefined) {
    const filters = (['status', 'since', 'limit'] as const).filter((k) => body[k] !== undefined);
    if (filters.length > 0) {
      throw new OperationError(
        'invalid_request',
        `${filters.join(', ')} choose among a pipeline's tasks; with taskIds the tasks named are taken whatever their status or age: give one or the other`,
      );
    }
    return {
      taskIds: [...new Set(body.taskIds)],
      ...(body.pipeline === undefined ? {} : { pipeline: body.pipeline }),
    };
  }
  if (body.pipeline === undefined) {
    throw new OperationError(
      'invalid_request',
      'say which runs to add: taskIds (a list of task ids), or pipeline (with status, since and limit to choose among its ended tasks)',
    );
  }
  return {
    pipeline: body.pipeline,
    ...(body.status === undefined ? {} : { status: body.status }),
    ...(body.since === undefined ? {} : { since: new Date(body.since) }),
    limit: body.limit ?? DEFAULT_LIMIT,
  };
}

/** Why no case was made: each task skipped with why, or why a pipeline selection found no task. */
async function whyNone(
  bus: JetStreamBus,
  select: RecordedSelect,
  skipped: readonly SkippedTask[],
): Promise<string> {
  if (skipped.length > 0) return skipped.map((s) => `task ${s.taskId}: ${s.why}`).join('; ');
  const workflows = await workflowStoreIfAny(bus);
  const records = workflows ? await readValues(workflows) : [];
  const pipeline = select.pipeline ?? '';
  if (!records.some((r) => r.pipeline === pipeline)) {
    const known = [...new Set(records.map((r) => r.pipeline))].sort();
    return `no task of pipeline ${pipeline} is known on this server${known.length > 0 ? `; tasks are of: ${known.join(', ')}` : ''}`;
  }
  const since = select.since === undefined ? '' : ` since ${select.since.toISOString()}`;
  return `no ${select.status ?? 'ended'} task of pipeline ${pipeline}${since}`;
}
