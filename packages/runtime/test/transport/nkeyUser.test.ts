import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readNatsAccess } from '../../src/transport/natsAccess.ts';
import { createNkeyUser } from '../../src/transport/nkeyUser.ts';

describe('createNkeyUser', () => {
  it('makes a user seed that readNatsAccess takes, and its public key', async () => {
    const user = createNkeyUser();
    expect(user.seed).toMatch(/^SU[A-Z2-7]{56}$/);
    expect(user.publicKey).toMatch(/^U[A-Z2-7]{55}$/);
    expect(createNkeyUser().seed).not.toBe(user.seed);

    const dir = await mkdtemp(join(tmpdir(), 'troupe-nkey-'));
    try {
      await writeFile(join(dir, 'u.nk'), `${user.seed}\n`);
      expect(await readNatsAccess({ nkey: join(dir, 'u.nk') })).toMatchObject({ nkeySeed: user.seed });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
