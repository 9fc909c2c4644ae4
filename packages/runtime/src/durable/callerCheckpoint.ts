/**
 * The checkpoint of the workflow that took a step in its own process (see `LocalSteps`): it records the step's output
 * when the step replies, and the outputs of the steps before it. Until it has stored every checkpoint made so far,
 * the step writes nothing to its journal (see {@link StepJournal.forLocalStep}); so the step's final model reply need
 * not be journaled, since nothing durable can come after it before the checkpoint holding it is stored.
 */
export interface CallerCheckpoint {
  /**
   * Resolves true once every checkpoint the workflow made so far is stored; false when it is not and will not be (the
   * record was taken over by another coordinator, the task's run here ended, or NATS stayed out of reach).
   */
  stored(): Promise<boolean>;
}

/** A step's journal write refused because its workflow's checkpoint before it was not stored: the step stops. */
export class CheckpointNotStoredError extends Error {
  override readonly name = 'CheckpointNotStoredError';

  constructor(stepId: string) {
    super(
      `step ${stepId} writes nothing to its journal: its workflow's checkpoint of the steps before it was not stored (the task was taken over or ended here, or NATS is out of reach)`,
    );
  }

  static is(error: unknown): error is CheckpointNotStoredError {
    return error instanceof CheckpointNotStoredError;
  }
}
