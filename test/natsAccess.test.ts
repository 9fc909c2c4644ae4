import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nkeys } from '@nats-io/transport-node';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

/**
 * A nats-server that takes only logged-in clients over TLS with a certificate of its CA: a user with a password and
 * a user with an nkey. The CA and certificates are made here with openssl.
 */
describe('NATS with users and TLS', () => {
  let nats: TestNats;
  let dir: string;
  let url: string;
  const processes: CliProcess[] = [];
  const file = (name: string) => join(dir, name);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-tls-'));
    makeCertificates(dir);
    const user = nkeys.createUser();
    await writeFile(file('submitter.nk'), `${new TextDecoder().decode(user.getSeed())}\n`, { mode: 0o600 });
    nats = await startTestNats({
      config: `
authorization {
  users = [
    { user: coordinator, password: "s3cret-coordinator" }
    { nkey: "${user.getPublicKey()}" }
  ]
}
tls {
  cert_file: "${file('server.pem')}"
  key_file: "${file('server-key.pem')}"
  ca_file: "${file('ca.pem')}"
  verify: true
}
`,
    });
    url = `tls://127.0.0.1:${nats.port}`;
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** The TLS options every client needs here, as the nats CLI's environment variables give them. */
  const tlsEnv = () => ({
    NATS_CA: file('ca.pem'),
    NATS_CERT: file('client.pem'),
    NATS_KEY: file('client-key.pem'),
  });

  it('runs a task end to end: a coordinator with a password, a submitter with an nkey, both over TLS', async () => {
    const home = file('home');
    const up = startTroupe(
      ['up', examplePath('demo.yaml'), '--server', url, '--home', home],
      cliEnv({ ...tlsEnv(), NATS_USER: 'coordinator', NATS_PASSWORD: 's3cret-coordinator' }),
    );
    processes.push(up);
    await up.waitFor(/troupe is up/, 30_000);
    const submitted = await troupe(
      ['submit', 'demo', 'Write the hello note', '--wait', '--server', url, '--nkey', file('submitter.nk')],
      cliEnv(tlsEnv()),
      60_000,
    );
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stdout).toContain('task.completed');
    // The coordinator's log never quotes its password; its heartbeat thread logged in as it did.
    expect(up.output()).not.toContain('s3cret-coordinator');
    expect(up.output()).not.toContain('the heartbeat thread is not running');
  });

  it('refuses a client without a client certificate, with a wrong password, or with no credentials', async () => {
    const noCertificate = await troupe(
      ['runs', '--server', url, '--nkey', file('submitter.nk'), '--tls-ca', file('ca.pem')],
      cliEnv(),
    );
    expect(noCertificate.code).toBe(1);
    expect(noCertificate.stderr).toMatch(/cannot connect to NATS at tls:\/\/127\.0\.0\.1:\d+/);
    expect(noCertificate.stderr).toContain('needs a client certificate its CA signed');
    const wrongPassword = await troupe(
      ['runs', '--server', url, '--user', 'coordinator'],
      cliEnv({ ...tlsEnv(), NATS_PASSWORD: 'guess' }),
    );
    expect(wrongPassword.code).toBe(1);
    expect(wrongPassword.stderr).toContain('Authorization Violation');
    expect(wrongPassword.stderr).not.toContain('guess');
    const nobody = await troupe(['runs', '--server', url], cliEnv(tlsEnv()));
    expect(nobody.code).toBe(1);
    expect(nobody.stderr).toContain('Authorization Violation');
  });

  it('says what is wrong with options that cannot work, before connecting', async () => {
    const alone = await troupe(['runs', '--server', url, '--password', 'x'], cliEnv());
    expect(alone).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('a NATS password needs its user'),
    });
    const both = await troupe(
      ['runs', '--server', url, '--user', 'a', '--nkey', file('submitter.nk')],
      cliEnv(),
    );
    expect(both.stderr).toContain('give one way to log in to NATS');
    const halfPair = await troupe(['runs', '--server', url, '--tls-cert', file('client.pem')], cliEnv());
    expect(halfPair.stderr).toContain('a TLS client certificate needs its key');
    const notASeed = await troupe(['runs', '--server', url, '--nkey', file('ca.pem')], cliEnv());
    expect(notASeed.stderr).toContain('holds no user nkey seed');
    const badInbox = await troupe(['runs', '--server', url, '--inbox', '_INBOX.me'], cliEnv());
    expect(badInbox.stderr).toContain('an inbox prefix must be a subject under troupe._inbox.');
  });
});

/** A CA, a server certificate for 127.0.0.1 and a client certificate, signed by it, in `dir`. */
function makeCertificates(dir: string): void {
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca-key.pem',
    '-out',
    'ca.pem',
    '-days',
    '2',
    '-subj',
    '/CN=troupe-test-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  );
  const sign = (name: string, extensions: string) => {
    execFileSync('sh', ['-c', `printf '${extensions}' > ${name}.ext`], { cwd: dir });
    openssl(
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${name}-key.pem`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    );
    openssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca-key.pem',
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
    );
  };
  sign('server', 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n');
  sign('client', 'extendedKeyUsage=clientAuth\\n');
}
