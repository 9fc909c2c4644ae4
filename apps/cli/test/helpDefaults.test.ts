import { DEFAULT_INTAKE_LIMITS, DEFAULT_STOP_TIMEOUT_MS } from '@troupe/coordinator';
import { MAX_TASK_DEPTH } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { HELP_DEFAULTS } from '../src/helpDefaults.ts';

describe('the defaults troupe --help shows', () => {
  it('are the ones the coordinator applies', () => {
    expect(HELP_DEFAULTS).toEqual({
      maxTaskBytes: DEFAULT_INTAKE_LIMITS.maxTaskBytes,
      maxTaskDepth: DEFAULT_INTAKE_LIMITS.maxTaskDepth,
      maxInputBytes: DEFAULT_INTAKE_LIMITS.maxInputBytes,
      maxTaskDepthLimit: MAX_TASK_DEPTH,
      stopTimeoutSeconds: DEFAULT_STOP_TIMEOUT_MS / 1000,
    });
  });
});
