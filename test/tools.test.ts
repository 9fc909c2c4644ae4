import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probeBubblewrap } from '@troupe/runtime';
import { startTestMcpHttpServer, type TestMcpHttpServer } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

describe('built-in and MCP tools under a pipeline policy', () => {
  let h: Harness;
  let dir: string;
  let web: Server;
  let port: number;
  let mcp: TestMcpHttpServer;
  const secretFile = () => join(dir, 'outside-secret.txt');
  let bubblewrap: { available: boolean; reason: string };

  beforeAll(async () => {
    bubblewrap = await probeBubblewrap();
    dir = await mkdtemp(join(tmpdir(), 'troupe-tools-'));
    await writeFile(secretFile(), 'top secret');
    web = createServer((_req, res) => res.end('hello from the web'));
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve));
    port = (web.address() as { port: number }).port;
    mcp = await startTestMcpHttpServer();
    process.env.TROUPE_E2E_SECRET = 'do-not-leak';
    const call = (name: string, args: unknown) => ({ name, arguments: args });
    const script = {
      agents: {
        worker: [
          {
            toolCalls: [
              call('run_command', { command: `cat ${secretFile()}` }),
              call('run_command', { command: 'echo "secret=$TROUPE_E2E_SECRET home=$HOME"' }),
              call('run_command', {
                command: `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port}' && echo connected`,
              }),
              call('run_command', { command: 'rm -rf notes' }),
              call('http_fetch', { url: `http://127.0.0.1:${port}/ok` }),
              call('http_fetch', { url: `http://localhost:${port}/ok` }),
              call('calc.add', { a: 2, b: 3 }),
            ],
          },
          { content: 'checked the tools' },
        ],
      },
    };
    await writeFile(join(dir, 'tooling.script.json'), JSON.stringify(script));
    await writeFile(
      join(dir, 'tooling.yaml'),
      `version: 1
name: tooling
models: { scripted: { provider: scripted, script: ./tooling.script.json } }
defaults: { model: scripted }
mcpServers:
  calc: { transport: http, url: "${mcp.url}", tools: [add] }
agents:
  worker:
    instructions: Use the tools.
    tools: [run_command, http_fetch, calc.add]
    permissions:
      - { tool: run_command, decision: allow, commands: [cat, echo, bash] }
      - { tool: http_fetch, decision: allow, hosts: ["127.0.0.1"] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    h = await startHarness([join(dir, 'tooling.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
    await mcp?.stop();
    await new Promise((resolve) => web?.close(resolve));
    await rm(dir, { recursive: true, force: true });
    delete process.env.TROUPE_E2E_SECRET;
  });

  it('runs each call under the policy and the sandbox, and reports every refusal to the model', async () => {
    publishTask(h, 'tooling', { id: 'tools-1', goal: 'exercise the tools' });
    expect((await h.finalOf('tools-1')).kind).toBe('task.completed');
    const [catSecret, env, network, rmDenied, fetchOk, fetchDenied, add] = ofKind(
      h.eventsOf('tools-1'),
      'tool.result',
    ).map((r) => r.data);

    // Whatever sandbox ran, the coordinator's environment does not reach the command, and HOME is the workspace.
    expect(env?.output).toContain('secret= home=');
    expect(env?.output).toContain(join(h.workspaceRoot, 'tooling', 'tools-1'));
    if (bubblewrap.available) {
      // bubblewrap: no file outside the workspace, no network.
      expect(catSecret?.output).toContain('sandbox: bubblewrap');
      expect(catSecret?.output).not.toContain('top secret');
      expect(catSecret?.output).toMatch(/exit code [1-9]/);
      expect(network?.output).not.toContain('connected');
    } else {
      // Without a working bubblewrap the fallback runs, and says so in the result the model and the event see.
      expect(catSecret?.output, `bubblewrap unusable here: ${bubblewrap.reason}`).toContain(
        'sandbox: process',
      );
    }
    // A command outside the allowed prefixes is refused, naming the rule.
    expect(rmDenied).toMatchObject({ ok: false, decision: 'deny', error: { code: 'denied' } });
    expect(rmDenied?.output).toContain('run_command');

    expect(fetchOk).toMatchObject({ ok: true });
    expect(fetchOk?.output).toContain('HTTP 200');
    expect(fetchOk?.output).toContain('hello from the web');
    expect(fetchDenied).toMatchObject({ ok: false, error: { code: 'denied' } });

    expect(add).toMatchObject({ ok: true, tool: 'calc.add' });
    expect(add?.output).toContain('2+3=5');
    expect(mcp.calls).toEqual([{ name: 'add', arguments: { a: 2, b: 3 } }]);
  });
});
