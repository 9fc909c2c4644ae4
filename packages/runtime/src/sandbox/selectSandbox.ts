import {
  type BubblewrapSandboxOptions,
  createBubblewrapSandbox,
  probeBubblewrap,
} from './bubblewrapSandbox.ts';
import { createProcessSandbox, type ProcessSandboxOptions } from './processSandbox.ts';
import type { Sandbox, SandboxKind } from './sandbox.ts';

/** What `selectSandbox` may choose from. */
export interface SelectSandboxOptions {
  /** `process` skips bubblewrap even where it works; `bubblewrap` (the default) uses it when the probe passes. */
  prefer?: SandboxKind;
  bubblewrap?: BubblewrapSandboxOptions;
  process?: ProcessSandboxOptions;
}

/**
 * The strongest sandbox that works here: bubblewrap when it is installed and its probe run succeeds (cached), else the
 * process fallback. `probeBubblewrap()` tells why bubblewrap was passed over.
 *
 * @example
 * const sandbox = await selectSandbox(); // sandbox.kind === 'bubblewrap' where namespaces work
 */
export async function selectSandbox(opts: SelectSandboxOptions = {}): Promise<Sandbox> {
  if (opts.prefer !== 'process' && (await probeBubblewrap(opts.bubblewrap)).available) {
    return createBubblewrapSandbox(opts.bubblewrap);
  }
  return createProcessSandbox(opts.process);
}
