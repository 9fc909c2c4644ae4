import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

/** The URL a gateway says it listens on. */
const urlIn = (output: string) => /gateway (?:on|listening on) (http:\/\/[\d.]+:\d+)/.exec(output)?.[1] ?? '';

describe('troupe token, troupe gateway and troupe up --gateway', () => {
  let dir: string;
  let nats: TestNats;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-gateway-cli-'));
    nats = await startTestNats();
  });
  afterAll(async () => {
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('makes a token shown once and stores only its hash; serves tasks to it alone', async () => {
    const file = join(dir, 'tokens.yaml');
    const made = await troupe(['token', 'ci', '--scope', 'submit', '--pipeline', 'demo', '--file', file]);
    expect(made.code).toBe(0);
    const secret = made.stdout.trim();
    expect(secret).toMatch(/^trp_[A-Za-z0-9_-]{40,}$/);
    const stored = await readFile(file, 'utf8');
    expect(stored).not.toContain(secret);
    expect(stored).toMatch(/sha256: [0-9a-f]{64}/);
    expect((await stat(file)).mode & 0o077).toBe(0);
    expect((await troupe(['token', 'ci', '--file', file])).stderr).toContain('has a token named ci already');
    expect((await troupe(['token', 'x', '--scope', 'root', '--file', file])).code).toBe(2);

    const home = join(dir, 'home');
    const up = startTroupe(['up', examplePath('demo.yaml'), '--home', home], cliEnv({ NATS_URL: nats.url }));
    const gateway = startTroupe(
      ['gateway', '--listen', '127.0.0.1:0', '--tokens', file, '--json'],
      cliEnv({ NATS_URL: nats.url }),
    );
    try {
      await up.waitFor(/troupe is up on/);
      await gateway.waitFor(/troupe gateway on http/);
      const url = urlIn(gateway.output());
      const submit = (token: string) =>
        fetch(`${url}/v1/pipelines/demo/tasks?wait=60`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ goal: 'hello from the gateway' }),
        });
      expect((await submit('not-the-token')).status).toBe(401);
      const done = await submit(secret);
      expect(done.status).toBe(200);
      expect(await done.json()).toMatchObject({ status: 'completed', pipeline: 'demo' });

      // The id secret is made beside the tokens file, for the owner only; a second gateway there shares it, so an
      // Idempotency-Key is the same task through either.
      const secretFile = join(dir, 'troupe-gateway-secret');
      expect((await stat(secretFile)).mode & 0o077).toBe(0);
      expect((await readFile(secretFile, 'utf8')).trim()).toMatch(/^[A-Za-z0-9_-]{43}$/);
      const second = startTroupe(
        ['gateway', '--listen', '127.0.0.1:0', '--tokens', file, '--json'],
        cliEnv({ NATS_URL: nats.url }),
      );
      try {
        await second.waitFor(/troupe gateway on http/);
        const keyed = (at: string) =>
          fetch(`${at}/v1/pipelines/demo/tasks`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${secret}`,
              'content-type': 'application/json',
              'idempotency-key': 'deploy-7',
            },
            body: JSON.stringify({ goal: 'once only' }),
          }).then((r) => r.json() as Promise<{ taskId: string; duplicate?: boolean }>);
        const first = await keyed(url);
        const again = await keyed(urlIn(second.output()));
        expect(again).toMatchObject({ taskId: first.taskId, duplicate: true });
      } finally {
        await second.stop();
      }
    } finally {
      await gateway.stop();
      await up.stop();
    }
    expect(gateway.output()).toContain('refused POST');
  }, 90_000);

  it('refuses to serve without a token unless told, and --no-auth beyond this machine', async () => {
    const env = cliEnv({ NATS_URL: nats.url });
    const none = await troupe(['gateway', '--listen', '127.0.0.1:0'], env);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('the gateway has no token to accept');
    const open = await troupe(['gateway', '--listen', '0.0.0.0:0', '--no-auth'], env);
    expect(open.code).toBe(2);
    expect(open.stderr).toContain('--no-auth serves only on this machine');
  });

  it("names up's own flags when troupe up --gateway cannot serve", async () => {
    const env = cliEnv({ NATS_URL: nats.url });
    const home = join(dir, 'home-hints');
    const none = await troupe(
      ['up', examplePath('demo.yaml'), '--home', home, '--gateway', '127.0.0.1:0'],
      env,
    );
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('give --gateway-tokens <file>');
    expect(none.stderr).toContain('for a gateway on this machine only, --gateway-no-auth');
    expect(none.stderr).not.toMatch(/give --tokens|only, --no-auth/);
    const badPort = await troupe(
      ['up', examplePath('demo.yaml'), '--home', home, '--gateway', 'nope', '--gateway-no-auth'],
      env,
    );
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toContain('--gateway must be a port or host:port');
  }, 60_000);

  it('serves the gateway beside the coordinator with troupe up --gateway', async () => {
    const up = startTroupe(
      [
        'up',
        examplePath('demo.yaml'),
        '--home',
        join(dir, 'home-2'),
        '--gateway',
        '127.0.0.1:0',
        '--gateway-no-auth',
        '--json',
      ],
      cliEnv({ NATS_URL: nats.url }),
    );
    try {
      await up.waitFor(/gateway: +http/);
      const url = /gateway: +(http:\/\/[\d.]+:\d+)/.exec(up.output())?.[1];
      const health = await fetch(`${url}/readyz`);
      expect(health.status).toBe(200);
      const tasks = await fetch(`${url}/v1/tasks`);
      expect(tasks.status).toBe(200);
      // With no tokens file, the id secret is kept in the home.
      expect((await stat(join(dir, 'home-2', 'troupe-gateway-secret'))).isFile()).toBe(true);
    } finally {
      expect(await up.stop()).toBe(0);
    }
  }, 90_000);
});
