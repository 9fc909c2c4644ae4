/**
 * Defaults shown in help, kept here so `--help` loads none of the packages; a test keeps them equal to the
 * coordinator's (DEFAULT_INTAKE_LIMITS, MAX_TASK_DEPTH, DEFAULT_STOP_TIMEOUT_MS), which `troupe up` applies and checks.
 */
export const HELP_DEFAULTS = {
  maxTaskBytes: 262_144,
  maxTaskDepth: 64,
  maxInputBytes: 16_777_216,
  maxTaskDepthLimit: 124,
  stopTimeoutSeconds: 20,
};
