import { TaskState } from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import type { WorkflowRecord } from '@troupe/protocol';
import { decodePlace, encodePlace } from '../pageCursor.ts';

/** What ListTasks asks for, once read. */
export interface TaskListQuery {
  /** Only these pipelines' tasks (the endpoint's, or every one the token may touch). */
  visible: (pipeline: string) => boolean;
  contextId?: string;
  state?: TaskState;
  /** Only tasks whose status changed after this time. */
  after?: string;
  pageSize: number;
  pageToken?: string;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 100;

/**
 * One page of tasks, newest status first (the time of the last change of each, then its id), with the token of the
 * next page ('' on the last) and how many match in all. A task whose status changes between two pages moves up the
 * list: a client paging through sees it again on a later page's first fetch, never loses one that did not change.
 */
export function pageOfTasks(
  records: readonly WorkflowRecord[],
  query: TaskListQuery,
): { page: WorkflowRecord[]; nextPageToken: string; totalSize: number } {
  const after = query.pageToken ? decodePageToken(query.pageToken) : undefined;
  const matching = records
    .filter(
      (r) =>
        query.visible(r.pipeline) &&
        (query.contextId === undefined || (r.metadata?.session ?? r.taskId) === query.contextId) &&
        (query.state === undefined || matchesState(r, query.state)) &&
        (query.after === undefined || r.updatedAt > query.after),
    )
    .sort(newestFirst);
  const rest = after ? matching.filter((r) => newestFirst(r, after) > 0) : matching;
  const page = rest.slice(0, query.pageSize);
  const last = page.at(-1);
  return {
    page,
    nextPageToken: rest.length > query.pageSize && last ? encodePageToken(last) : '',
    totalSize: matching.length,
  };
}

/**
 * Whether a record is in an A2A state, from the record alone (listing reads no events): a running task waiting on a
 * person is INPUT_REQUIRED, any other running one WORKING (and SUBMITTED too while no step has said what it does).
 */
function matchesState(record: WorkflowRecord, state: TaskState): boolean {
  switch (record.status) {
    case 'completed':
      return state === TaskState.TASK_STATE_COMPLETED;
    case 'failed':
      return state === TaskState.TASK_STATE_FAILED;
    case 'cancelled':
      return state === TaskState.TASK_STATE_CANCELED;
    case 'running':
      if (record.activity?.kind === 'person') return state === TaskState.TASK_STATE_INPUT_REQUIRED;
      if (state === TaskState.TASK_STATE_WORKING) return true;
      return state === TaskState.TASK_STATE_SUBMITTED && record.activity === undefined;
  }
}

type Ordered = Pick<WorkflowRecord, 'updatedAt' | 'taskId'>;

const newestFirst = (a: Ordered, b: Ordered) =>
  b.updatedAt.localeCompare(a.updatedAt) || a.taskId.localeCompare(b.taskId);

const encodePageToken = (r: Ordered): string => encodePlace({ at: r.updatedAt, taskId: r.taskId });

function decodePageToken(token: string): Ordered {
  const place = decodePlace(token);
  if (!place) throw new RequestMalformedError('pageToken: not one this gateway gave; start again without it');
  return { updatedAt: place.at, taskId: place.taskId };
}

/** The page size asked for, within 1 to {@link MAX_PAGE_SIZE}; {@link DEFAULT_PAGE_SIZE} when not given. */
export function pageSizeOf(asked: number | undefined): number {
  if (asked === undefined || asked === 0) return DEFAULT_PAGE_SIZE;
  if (!Number.isInteger(asked) || asked < 1 || asked > MAX_PAGE_SIZE) {
    throw new RequestMalformedError(`pageSize: ${asked} is not from 1 to ${MAX_PAGE_SIZE}`);
  }
  return asked;
}
