import { lstat, mkdtemp, readlink, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { errorMessage } from '@troupe/protocol';
import { runProcessGroup } from './processGroup.ts';
import {
  limitedShellArgs,
  minimalEnv,
  type ResourceLimits,
  type Sandbox,
  type SandboxRunOptions,
} from './sandbox.ts';

/** Options of the bubblewrap sandbox. */
export interface BubblewrapSandboxOptions {
  /** The `bwrap` program; looked up on PATH by default. */
  bwrapPath?: string;
  limits?: ResourceLimits;
  /** Further host paths the command may read, such as a toolchain under `/opt`. */
  readOnlyPaths?: readonly string[];
}

// Top-level system directories; on merged-/usr systems they are symlinks into /usr and are recreated as such.
const systemDirs = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
// Only what the dynamic loader, `alternatives` symlinks and user lookups need; no keys, no shadow files.
const etcPaths = [
  '/etc/alternatives',
  '/etc/ld.so.cache',
  '/etc/ld.so.conf',
  '/etc/ld.so.conf.d',
  '/etc/passwd',
  '/etc/group',
  '/etc/nsswitch.conf',
  '/etc/localtime',
];
// Name resolution and TLS trust, mounted only when the command may use the network.
const networkEtcPaths = [
  '/etc/resolv.conf',
  '/etc/hosts',
  '/etc/gai.conf',
  '/etc/ssl',
  '/etc/ca-certificates',
];

/**
 * A sandbox on bubblewrap: new namespaces (`--unshare-all`, so no network unless the run asks for it), read-only
 * `/usr`, system libraries and a few `/etc` files, a fresh `/tmp`, minimal `/proc` and `/dev`, and the workspace
 * bound read-write at its own path as the working directory. Nothing else of the host is visible. The environment is
 * cleared to the minimal one; `ulimit` limits apply as in the fallback.
 *
 * @example
 * if ((await probeBubblewrap()).available) sandbox = createBubblewrapSandbox();
 */
export function createBubblewrapSandbox(opts: BubblewrapSandboxOptions = {}): Sandbox {
  const bwrap = opts.bwrapPath ?? 'bwrap';
  return {
    kind: 'bubblewrap',
    async run(run) {
      const workspace = await realpath(run.cwd);
      const args = await bubblewrapArgs(workspace, run, opts);
      const result = await runProcessGroup(bwrap, args, {
        cwd: workspace,
        // bwrap itself needs only PATH to be found; `--clearenv` keeps even that from the command.
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
        timeoutMs: run.timeoutMs,
        maxOutputBytes: run.maxOutputBytes,
        signal: run.signal,
      });
      return { ...result, sandbox: 'bubblewrap' };
    },
  };
}

async function bubblewrapArgs(
  workspace: string,
  run: SandboxRunOptions,
  opts: BubblewrapSandboxOptions,
): Promise<string[]> {
  // --die-with-parent: killing bwrap (our process group) takes down the sandbox's own pid namespace with it.
  const args = ['--unshare-all', '--new-session', '--die-with-parent', '--cap-drop', 'ALL'];
  if (run.network) args.push('--share-net');
  args.push('--clearenv');
  for (const [name, value] of Object.entries(minimalEnv(workspace, run.env)))
    args.push('--setenv', name, value);
  args.push('--ro-bind', '/usr', '/usr');
  for (const dir of systemDirs) args.push(...(await systemDirArgs(dir)));
  for (const file of run.network ? [...etcPaths, ...networkEtcPaths] : etcPaths) {
    args.push('--ro-bind-try', file, file);
  }
  for (const extra of opts.readOnlyPaths ?? []) args.push('--ro-bind', extra, extra);
  args.push('--tmpfs', '/tmp', '--proc', '/proc', '--dev', '/dev');
  // After /tmp's tmpfs, so a workspace under /tmp is bound on top of it rather than hidden by it.
  args.push('--bind', workspace, workspace, '--chdir', workspace);
  args.push('--', '/bin/sh', ...limitedShellArgs(run.command, run.timeoutMs, opts.limits));
  return args;
}

async function systemDirArgs(dir: string): Promise<string[]> {
  try {
    const info = await lstat(dir);
    if (info.isSymbolicLink()) return ['--symlink', await readlink(dir), dir];
    return info.isDirectory() ? ['--ro-bind', dir, dir] : [];
  } catch {
    return [];
  }
}

/** Whether bubblewrap can run commands here, and if not, why. */
export interface BubblewrapProbe {
  available: boolean;
  reason: string;
}

const probes = new Map<string, Promise<BubblewrapProbe>>();

/**
 * Runs `echo ok` in a bubblewrap sandbox once per `bwrapPath` and caches the answer. Containers often lack the user,
 * network or pid namespaces bubblewrap needs (or forbid mounting /proc), so being installed is not enough.
 */
export function probeBubblewrap(opts: BubblewrapSandboxOptions = {}): Promise<BubblewrapProbe> {
  const key = opts.bwrapPath ?? 'bwrap';
  let probe = probes.get(key);
  if (!probe) {
    probe = runProbe(opts);
    probes.set(key, probe);
  }
  return probe;
}

async function runProbe(opts: BubblewrapSandboxOptions): Promise<BubblewrapProbe> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'troupe-bwrap-probe-'));
  try {
    const result = await createBubblewrapSandbox(opts).run({
      command: 'echo ok',
      cwd: dir,
      timeoutMs: 10_000,
      network: false,
      maxOutputBytes: 4096,
      signal: new AbortController().signal,
    });
    if (result.exitCode === 0 && result.stdout.trim() === 'ok') {
      return { available: true, reason: 'bubblewrap ran a probe command in new namespaces' };
    }
    const said = result.stderr.trim() || `exit code ${result.exitCode ?? result.signal}`;
    return { available: false, reason: `bubblewrap is installed but cannot sandbox here: ${said}` };
  } catch (error) {
    const reason = errorMessage(error);
    return { available: false, reason: `bubblewrap could not be started: ${reason}` };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
