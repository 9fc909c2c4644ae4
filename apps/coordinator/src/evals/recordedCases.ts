/** Making cases of recorded tasks lives in `@troupe/client`, which the CLI and the gateway both call. */
export {
  type Chosen,
  type RecordedCases,
  type RecordedSelect,
  recordedCases,
  type SkippedTask,
  tasksToRecord,
} from '@troupe/client';
