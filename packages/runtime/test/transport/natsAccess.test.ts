import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nkeys } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactSecrets } from '../../src/logging/secrets.ts';
import { connectionOptions, readNatsAccess } from '../../src/transport/natsAccess.ts';

describe('readNatsAccess', () => {
  let dir: string;
  const seed = new TextDecoder().decode(nkeys.createUser().getSeed());

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-access-'));
    await writeFile(join(dir, 'user.nk'), `${seed}\n`);
    await writeFile(join(dir, 'ca.pem'), '-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n');
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('reads a seed file and certificates into what nats.js connects with', async () => {
    const access = await readNatsAccess({
      nkey: join(dir, 'user.nk'),
      tlsCa: join(dir, 'ca.pem'),
      inbox: 'troupe._inbox.w1',
    });
    expect(access).toEqual({
      nkeySeed: seed,
      tls: { ca: '-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n' },
      inboxPrefix: 'troupe._inbox.w1',
    });
    const options = connectionOptions(access);
    expect(options).toMatchObject({ inboxPrefix: 'troupe._inbox.w1', tls: { ca: expect.any(String) } });
    expect(options.authenticator).toHaveLength(1);
    // The seed is a secret from now on: no log line quotes it.
    expect(redactSecrets(`seed ${seed}`)).not.toContain(seed);
  });

  it('gives a user and password as they are, and the shared inbox prefix by default', async () => {
    const access = await readNatsAccess({ user: 'ana', password: 'pw-7731-xyz' });
    expect(connectionOptions(access)).toEqual({
      user: 'ana',
      pass: 'pw-7731-xyz',
      inboxPrefix: 'troupe._inbox',
    });
    expect(redactSecrets('pw-7731-xyz')).not.toContain('pw-7731-xyz');
    expect(connectionOptions(undefined)).toEqual({ inboxPrefix: 'troupe._inbox' });
  });

  it('refuses what cannot work, saying what to do', async () => {
    await expect(readNatsAccess({ password: 'x' })).rejects.toThrow('a NATS password needs its user');
    await expect(readNatsAccess({ user: 'a', nkey: join(dir, 'user.nk') })).rejects.toThrow(
      'give one way to log in to NATS',
    );
    await expect(readNatsAccess({ tlsKey: join(dir, 'ca.pem') })).rejects.toThrow(
      'a TLS client certificate needs its key',
    );
    await expect(readNatsAccess({ nkey: join(dir, 'ca.pem') })).rejects.toThrow('holds no user nkey seed');
    await expect(readNatsAccess({ creds: join(dir, 'user.nk') })).rejects.toThrow(
      'is not a NATS .creds file',
    );
    await expect(readNatsAccess({ nkey: join(dir, 'missing.nk') })).rejects.toThrow(
      /cannot read the nkey seed file .*missing\.nk/,
    );
    await expect(readNatsAccess({ inbox: 'troupe._inbox' })).rejects.toThrow(
      'an inbox prefix must be a subject under',
    );
  });
});
