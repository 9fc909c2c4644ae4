import { access, readFile, realpath, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createBubblewrapSandbox, probeBubblewrap } from '../../src/sandbox/bubblewrapSandbox.ts';
import { createProcessSandbox } from '../../src/sandbox/processSandbox.ts';
import type { Sandbox, SandboxResult, SandboxRunOptions } from '../../src/sandbox/sandbox.ts';
import { selectSandbox } from '../../src/sandbox/selectSandbox.ts';
import { useTempDirs } from '../tools/tempDirs.ts';
import { isAlive, pidsWithArgument, useTcpServer } from './sandboxFixtures.ts';

const tempDir = useTempDirs();
const tcpServer = useTcpServer();
const probe = await probeBubblewrap();

async function workspace(): Promise<string> {
  return realpath(await tempDir());
}

function run(sandbox: Sandbox, cwd: string, command: string, opts: Partial<SandboxRunOptions> = {}) {
  return sandbox.run({
    command,
    cwd,
    timeoutMs: 10_000,
    network: false,
    maxOutputBytes: 64 * 1024,
    signal: new AbortController().signal,
    ...opts,
  });
}

const connect = (port: number) => `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port}' && echo connected`;

beforeAll(() => {
  process.env.TROUPE_TEST_SECRET = 'hunter2';
});
afterAll(() => {
  delete process.env.TROUPE_TEST_SECRET;
});

/** What both sandboxes promise. */
function behavesAsASandbox(kind: 'bubblewrap' | 'process', make: () => Sandbox) {
  it('runs sh -c and captures exit code, stdout and stderr', async () => {
    const ws = await workspace();
    const result = await run(make(), ws, 'echo hello; echo oops >&2; exit 3');
    expect(result).toEqual<SandboxResult>({
      exitCode: 3,
      signal: null,
      stdout: 'hello\n',
      stderr: 'oops\n',
      timedOut: false,
      truncated: false,
      sandbox: kind,
    });
  });

  it('runs in the workspace, and files written there persist', async () => {
    const ws = await workspace();
    const result = await run(make(), ws, 'pwd; echo made > made.txt; mkdir -p sub && echo deep > sub/d.txt');
    expect(result.stdout).toBe(`${ws}\n`);
    await expect(readFile(path.join(ws, 'made.txt'), 'utf8')).resolves.toBe('made\n');
    await expect(readFile(path.join(ws, 'sub', 'd.txt'), 'utf8')).resolves.toBe('deep\n');
  });

  it("gives the command only the minimal environment, never the parent's", async () => {
    const ws = await workspace();
    expect(process.env.TROUPE_TEST_SECRET).toBe('hunter2');
    const result = await run(
      make(),
      ws,
      'echo "secret=[$TROUPE_TEST_SECRET] home=$HOME path=$PATH lang=$LANG extra=$EXTRA"; env',
      { env: { EXTRA: 'given' } },
    );
    const [first] = result.stdout.split('\n');
    expect(first).toBe(`secret=[] home=${ws} path=/usr/local/bin:/usr/bin:/bin lang=C.UTF-8 extra=given`);
    expect(result.stdout).not.toContain('hunter2');
  });

  it('kills the whole process group on timeout, background jobs included', async () => {
    const ws = await workspace();
    const marker = `30.${process.pid}${Date.now() % 1000}`;
    const running = run(make(), ws, `sleep ${marker} & echo $!; sleep ${marker} & echo $!; wait`, {
      timeoutMs: 2000,
    });
    // Host pids, found by the sleeps' unusual argument: under bubblewrap the printed pids are the namespace's own.
    const sleeping = await vi.waitFor(
      async () => {
        const pids = await pidsWithArgument(marker);
        if (pids.length !== 2) throw new Error(`found ${pids.length} sleeps so far`);
        return pids;
      },
      { timeout: 1800, interval: 25 },
    );
    const result = await running;
    expect(result).toMatchObject({ exitCode: null, signal: 'SIGKILL', timedOut: true, sandbox: kind });
    const printed = result.stdout.trim().split('\n').map(Number);
    expect(printed).toHaveLength(2);
    if (kind === 'process') expect(printed.sort((a, b) => a - b)).toEqual(sleeping);
    await vi.waitFor(() => expect(sleeping.filter(isAlive)).toEqual([]), { timeout: 2000 });
    expect(await pidsWithArgument(marker)).toEqual([]);
  });

  it('kills the process group when aborted and rejects with the reason', async () => {
    const ws = await workspace();
    const controller = new AbortController();
    const marker = `40.${process.pid}${Date.now() % 1000}`;
    const running = run(make(), ws, `sleep ${marker} & wait`, { signal: controller.signal });
    await vi.waitFor(
      async () => {
        if ((await pidsWithArgument(marker)).length !== 1) throw new Error('not started yet');
      },
      { timeout: 1800, interval: 25 },
    );
    const reason = new Error('stop now');
    controller.abort(reason);
    await expect(running).rejects.toBe(reason);
    await vi.waitFor(async () => expect(await pidsWithArgument(marker)).toEqual([]), { timeout: 2000 });
  });

  it('keeps maxOutputBytes of each stream, drains the rest, and marks it truncated', async () => {
    const ws = await workspace();
    const result = await run(make(), ws, "head -c 200000 /dev/zero | tr '\\0' a; echo done >&2", {
      maxOutputBytes: 1000,
    });
    expect(result).toMatchObject({ exitCode: 0, stderr: 'done\n', truncated: true });
    expect(result.stdout).toBe('a'.repeat(1000));
  });

  it('never ends truncated output in half a character', async () => {
    const ws = await workspace();
    const result = await run(make(), ws, "printf '\\303\\251\\303\\251\\303\\251'", { maxOutputBytes: 5 });
    expect(result).toMatchObject({ stdout: 'éé', truncated: true });
  });

  it('applies the ulimit resource limits', async () => {
    const ws = await workspace();
    const sandbox =
      kind === 'bubblewrap'
        ? createBubblewrapSandbox({
            limits: { cpuSeconds: 7, virtualMemoryKiB: 3_000_000, fileSizeKiB: 100 },
          })
        : createProcessSandbox({ limits: { cpuSeconds: 7, virtualMemoryKiB: 3_000_000, fileSizeKiB: 100 } });
    const limits = await run(sandbox, ws, 'ulimit -t; ulimit -v; ulimit -f');
    expect(limits.stdout).toBe('7\n3000000\n200\n');
    const tooBig = await run(sandbox, ws, 'head -c 200000 /dev/zero > big.bin');
    expect(tooBig.exitCode).not.toBe(0);
    expect((await readFile(path.join(ws, 'big.bin'))).length).toBe(100 * 1024);
  });
}

describe('process sandbox (the fallback)', () => {
  behavesAsASandbox('process', () => createProcessSandbox());

  it('cannot hide files outside the workspace, and says it is only a process sandbox', async () => {
    const ws = await workspace();
    const secretDir = await workspace();
    await writeFile(path.join(secretDir, 'secret.txt'), 'top secret');
    const result = await run(createProcessSandbox(), ws, `cat ${path.join(secretDir, 'secret.txt')}`);
    expect(result).toMatchObject({ exitCode: 0, stdout: 'top secret', sandbox: 'process' });
  });

  it('cannot withhold the network either: network false still connects, under sandbox "process"', async () => {
    const ws = await workspace();
    const result = await run(createProcessSandbox(), ws, connect(await tcpServer()), { network: false });
    expect(result).toMatchObject({ exitCode: 0, stdout: 'connected\n', sandbox: 'process' });
  });
});

if (probe.available) {
  describe('bubblewrap sandbox', () => {
    behavesAsASandbox('bubblewrap', () => createBubblewrapSandbox());

    it('cannot read a file outside the workspace', async () => {
      const ws = await workspace();
      const secretDir = await workspace();
      const secret = path.join(secretDir, 'secret.txt');
      await writeFile(secret, 'top secret');
      const result = await run(
        createBubblewrapSandbox(),
        ws,
        `cat ${secret}; ls /root /home; cat /etc/hostname`,
      );
      expect(result.exitCode).not.toBe(0);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(`cat: ${secret}: No such file or directory`);
      expect(result.stderr).toContain('cat: /etc/hostname: No such file or directory');
    });

    it('cannot write outside the workspace; its /tmp is private', async () => {
      const ws = await workspace();
      const outside = await workspace();
      const result = await run(
        createBubblewrapSandbox(),
        ws,
        `echo x > ${outside}/escaped; echo x > /usr/escaped; echo private > /tmp/t && cat /tmp/t`,
      );
      expect(result.stdout).toBe('private\n');
      await expect(access(path.join(outside, 'escaped'))).rejects.toThrow();
      await expect(access('/usr/escaped')).rejects.toThrow();
    });

    // The probe runs with --unshare-all, so a host whose network namespaces fail never gets here: it falls back.
    it('blocks the network unless the run asks for it', async () => {
      const ws = await workspace();
      const port = await tcpServer();
      const blocked = await run(createBubblewrapSandbox(), ws, connect(port), { network: false });
      expect(blocked.exitCode).not.toBe(0);
      expect(blocked.stdout).toBe('');
      const allowed = await run(createBubblewrapSandbox(), ws, connect(port), { network: true });
      expect(allowed).toMatchObject({ exitCode: 0, stdout: 'connected\n' });
    });

    it('rejects when bwrap cannot be started', async () => {
      const ws = await workspace();
      await expect(
        run(createBubblewrapSandbox({ bwrapPath: '/nonexistent/bwrap' }), ws, 'true'),
      ).rejects.toThrow(/ENOENT/);
    });
  });
} else {
  describe('bubblewrap sandbox', () => {
    it(`is not usable on this host (${probe.reason}), so selectSandbox falls back to process`, async () => {
      expect((await selectSandbox()).kind).toBe('process');
    });
  });
}

describe('selectSandbox', () => {
  it('picks the process sandbox when asked to', async () => {
    expect((await selectSandbox({ prefer: 'process' })).kind).toBe('process');
  });

  it(`picks bubblewrap exactly when its probe passes (here: ${probe.available ? 'passes' : 'fails'})`, async () => {
    expect((await selectSandbox()).kind).toBe(probe.available ? 'bubblewrap' : 'process');
    expect((await selectSandbox({ prefer: 'bubblewrap' })).kind).toBe(
      probe.available ? 'bubblewrap' : 'process',
    );
  });

  it('caches the probe', () => {
    expect(probeBubblewrap()).toBe(probeBubblewrap());
  });

  it('falls back to process when bwrap cannot start, and the probe says why', async () => {
    const bubblewrap = { bwrapPath: '/nonexistent/bwrap' };
    expect((await selectSandbox({ bubblewrap })).kind).toBe('process');
    await expect(probeBubblewrap(bubblewrap)).resolves.toEqual({
      available: false,
      reason: 'bubblewrap could not be started: spawn /nonexistent/bwrap ENOENT',
    });
  });
});
