import { errorMessage } from '@troupe/protocol';
import { type RemoteCallRecord, StepJournal } from '@troupe/runtime';
import { A2aCallError } from './a2aCallError.ts';
import type { RemoteRun } from './remoteStep.ts';

/** Records the call before anything is sent, unless another run of the step has: false then. */
export async function claim(
  run: RemoteRun,
  record: Omit<RemoteCallRecord, 'kind' | 'recordedAt'>,
): Promise<boolean> {
  const journal = run.deps.journal;
  if (!journal) return true;
  const key = StepJournal.remoteKey(run.request.stepId);
  const now = new Date(run.deps.clock.now());
  run.revision = await journaled(() => journal.createRemoteCall(key, record, now));
  if (run.revision === undefined) return false;
  run.record = record;
  return true;
}

/** Journals the call as it stands now. */
export async function save(
  run: RemoteRun,
  record: Omit<RemoteCallRecord, 'kind' | 'recordedAt'>,
): Promise<void> {
  run.record = record;
  const key = StepJournal.remoteKey(run.request.stepId);
  await journaled(() => run.deps.journal?.recordRemoteCall(key, record, new Date(run.deps.clock.now())));
}

/** A journal out of reach fails the step `journal_unavailable`: the workflow sends it again, and that run goes on. */
export async function journaled<T>(op: () => Promise<T> | undefined): Promise<T | undefined> {
  try {
    return await op();
  } catch (error) {
    throw new A2aCallError(
      'journal_unavailable',
      `the step journal cannot be reached: ${errorMessage(error)}`,
      {
        cause: error,
      },
    );
  }
}
