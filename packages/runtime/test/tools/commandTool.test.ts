import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createBubblewrapSandbox, probeBubblewrap } from '../../src/sandbox/bubblewrapSandbox.ts';
import { createProcessSandbox } from '../../src/sandbox/processSandbox.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { createCommandTool, runCommandTool } from '../../src/tools/commandTool.ts';
import { ToolExecutor } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { useTcpServer } from '../sandbox/sandboxFixtures.ts';
import { useTempDirs } from './tempDirs.ts';
import { call } from './toolHarness.ts';

const tempDir = useTempDirs();
const tcpServer = useTcpServer();
const probe = await probeBubblewrap();

async function workspace(): Promise<string> {
  return realpath(await tempDir());
}

const sandboxes: { kind: 'bubblewrap' | 'process'; make: () => Sandbox }[] = [
  { kind: 'process', make: () => createProcessSandbox() },
];
if (probe.available) sandboxes.push({ kind: 'bubblewrap', make: () => createBubblewrapSandbox() });

for (const { kind, make } of sandboxes) {
  describe(`run_command on the ${kind} sandbox`, () => {
    it('reports exit code, stdout and stderr; a non-zero exit is a result, not an error', async () => {
      const ws = await workspace();
      const output = await call(createCommandTool(make()), ws, { command: 'echo hi; echo oops >&2; exit 2' });
      expect(output).toBe(`exit code 2 (sandbox: ${kind})\n--- stdout ---\nhi\n--- stderr ---\noops`);
    });

    it('runs in the workspace', async () => {
      const ws = await workspace();
      const output = await call(createCommandTool(make()), ws, { command: 'pwd && echo kept > kept.txt' });
      expect(output).toBe(`exit code 0 (sandbox: ${kind})\n--- stdout ---\n${ws}\n--- stderr ---\n`);
      await expect(readFile(path.join(ws, 'kept.txt'), 'utf8')).resolves.toBe('kept\n');
    });

    it('reports a timeout in the text', async () => {
      const ws = await workspace();
      const output = await call(createCommandTool(make()), ws, {
        command: 'echo started; sleep 30',
        timeoutSeconds: 1,
      });
      expect(output).toBe(
        [
          `exit code none (killed by SIGKILL) (sandbox: ${kind})`,
          '--- stdout ---',
          'started',
          '--- stderr ---',
          '',
          '[timed out after 1 s; the process group was killed]',
        ].join('\n'),
      );
    });

    it('marks output cut at maxOutputBytes', async () => {
      const ws = await workspace();
      const output = await call(createCommandTool(make(), { maxOutputBytes: 10 }), ws, {
        command: 'seq 1 1000',
      });
      expect(output).toBe(
        [
          `exit code 0 (sandbox: ${kind})`,
          '--- stdout ---',
          '1\n2\n3\n4\n5',
          '--- stderr ---',
          '',
          '[output truncated: each stream is cut at 10 bytes]',
        ].join('\n'),
      );
    });

    it('passes the configured environment and nothing of the parent', async () => {
      const ws = await workspace();
      process.env.TROUPE_TEST_SECRET = 'hunter2';
      try {
        const output = await call(createCommandTool(make(), { env: { CI: '1' } }), ws, {
          command: 'echo "[$TROUPE_TEST_SECRET] CI=$CI"',
        });
        expect(output).toContain('--- stdout ---\n[] CI=1\n');
      } finally {
        delete process.env.TROUPE_TEST_SECRET;
      }
    });

    it('stops the command when the call is cancelled', async () => {
      const ws = await workspace();
      const controller = new AbortController();
      const running = call(
        createCommandTool(make()),
        ws,
        { command: 'sleep 30' },
        { signal: controller.signal },
      );
      setTimeout(() => controller.abort(new Error('cancelled by test')), 100);
      await expect(running).rejects.toThrow('cancelled by test');
    });
  });
}

describe('run_command network access', () => {
  /** Runs through the executor, so the policy rule that allowed the call reaches the tool. */
  async function viaExecutor(sandbox: Sandbox, network: boolean | undefined, port: number) {
    const ws = await workspace();
    const executor = new ToolExecutor({
      registry: new ToolRegistry().register(createCommandTool(sandbox)),
      policy: {
        tools: ['run_command'],
        rules: [
          {
            tool: 'run_command',
            decision: 'allow',
            commands: ['bash', 'echo'],
            ...(network === undefined ? {} : { network }),
          },
        ],
      },
      agent: 'coder',
      workspace: ws,
      taskId: 't',
    });
    const command = `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port}' && echo connected`;
    return executor.execute({ id: 'c1', name: 'run_command', arguments: JSON.stringify({ command }) });
  }

  if (probe.available) {
    it('is withheld under bubblewrap unless the rule says network: true', async () => {
      const port = await tcpServer();
      const withheld = await viaExecutor(createBubblewrapSandbox(), undefined, port);
      expect(withheld).toMatchObject({ ok: true, decision: 'allow' });
      expect(withheld.output).toMatch(
        /^exit code 1 \(sandbox: bubblewrap\)\n--- stdout ---\n\n--- stderr ---\n/,
      );
      const denied = await viaExecutor(createBubblewrapSandbox(), false, port);
      expect(denied.output).toMatch(/^exit code 1 /);
      const granted = await viaExecutor(createBubblewrapSandbox(), true, port);
      expect(granted.output).toBe(
        'exit code 0 (sandbox: bubblewrap)\n--- stdout ---\nconnected\n--- stderr ---\n',
      );
    });
  } else {
    it(`cannot be withheld here: bubblewrap is unusable (${probe.reason}); the output says sandbox: process`, async () => {
      const granted = await viaExecutor(createProcessSandbox(), undefined, await tcpServer());
      expect(granted.output).toMatch(/^exit code 0 \(sandbox: process\)/);
    });
  }
});

describe('runCommandTool', () => {
  it(`runs on the sandbox selectSandbox picks (here: ${probe.available ? 'bubblewrap' : 'process'})`, async () => {
    const ws = await workspace();
    const output = await call(runCommandTool, ws, { command: 'echo default' });
    expect(output).toBe(
      `exit code 0 (sandbox: ${probe.available ? 'bubblewrap' : 'process'})\n--- stdout ---\ndefault\n--- stderr ---\n`,
    );
  });

  it('allows at most 600 seconds, and outlasts that in the executor', () => {
    expect(runCommandTool.input.safeParse({ command: 'x', timeoutSeconds: 600 }).success).toBe(true);
    expect(runCommandTool.input.safeParse({ command: 'x', timeoutSeconds: 601 }).success).toBe(false);
    expect(runCommandTool.input.safeParse({ command: '' }).success).toBe(false);
    expect(runCommandTool.timeoutMs).toBeGreaterThan(600_000);
  });

  it('fails with a ToolError when the sandbox cannot start', async () => {
    const ws = await workspace();
    const broken = createCommandTool(createBubblewrapSandbox({ bwrapPath: '/nonexistent/bwrap' }));
    await expect(call(broken, ws, { command: 'true' })).rejects.toMatchObject({
      name: 'ToolError',
      code: 'failed',
      message: 'run_command could not start the bubblewrap sandbox: spawn /nonexistent/bwrap ENOENT',
    });
  });
});
