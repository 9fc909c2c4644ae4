import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthRefusal, hashToken, TokenStore } from '../src/auth.ts';
import { webSocketRefusal } from '../src/origins.ts';
import { StreamQuota, TooManyStreams } from '../src/streamQuota.ts';
import { loadOrCreateSecret, TaskIds } from '../src/taskIds.ts';
import { watchTokens } from '../src/tokenWatch.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-gateway-unit-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('webSocketRefusal', () => {
  const none = { allowed: [] };
  it.each([
    ['no Origin: not a browser', undefined, 'evil.example', none, true],
    ['the page of a loopback name', 'http://localhost:8080', 'localhost:8080', none, true],
    ['the page of 127.0.0.1', 'http://127.0.0.1:8080', '127.0.0.1:8080', none, true],
    ['the page of [::1]', 'http://[::1]:8080', '[::1]:8080', none, true],
    ['the page of an IP address', 'http://10.0.0.5:8080', '10.0.0.5:8080', none, true],
    ['a rebound name, as Origin and Host', 'http://rebind.example:8080', 'rebind.example:8080', none, false],
    ['another origin than the host', 'http://evil.example', '127.0.0.1:8080', none, false],
    ['an allowed origin', 'https://app.example', '10.0.0.5:8080', { allowed: ['https://app.example'] }, true],
    ['any origin under *', 'https://evil.example', 'evil.example', { allowed: ['*'] }, true],
    [
      'the public URL’s origin',
      'https://troupe.example.com',
      'troupe.example.com',
      { allowed: [], publicUrl: 'https://troupe.example.com' },
      true,
    ],
    [
      'the public URL’s host, on another port',
      'http://troupe.example.com:8080',
      'troupe.example.com:8080',
      { allowed: [], publicUrl: 'https://troupe.example.com' },
      true,
    ],
    ['an Origin that is not one', 'null', 'localhost:8080', none, false],
  ] as const)('%s', (_why, origin, host, config, allowed) => {
    expect(webSocketRefusal(origin, host, config) === undefined).toBe(allowed);
  });

  it('says how to allow a name it does not know', () => {
    expect(webSocketRefusal('http://rebind.example', 'rebind.example', none)).toContain(
      'give it as --public-url, or allow the origin with --cors-origin',
    );
  });

  it('names the flags the gateway was started with, as troupe up --gateway names them', () => {
    const flags = { publicUrl: '--gateway-public-url', corsOrigin: '--cors-origin' };
    expect(webSocketRefusal('http://rebind.example', 'rebind.example', { ...none, flags })).toContain(
      'give it as --gateway-public-url, or allow the origin with --cors-origin',
    );
  });
});

describe('StreamQuota', () => {
  const ana = { name: 'ana', scopes: ['read' as const] };
  const bo = { name: 'bo', scopes: ['read' as const] };

  it('refuses a token past its cap with 429 naming it, counts tokens apart, and takes a slot back once', () => {
    const quota = new StreamQuota({ streams: 2, consumers: 1 });
    const first = quota.take(ana, 'streams');
    quota.take(ana, 'streams');
    expect(() => quota.take(ana, 'streams')).toThrow(TooManyStreams);
    expect(() => quota.check(ana, 'streams')).toThrow(/token ana has 2 event streams and WebSockets open/);
    expect(() => quota.take(bo, 'streams')).not.toThrow();
    quota.take(ana, 'consumers');
    let refused: unknown;
    try {
      quota.take(ana, 'consumers');
    } catch (error) {
      refused = error;
    }
    expect(refused).toMatchObject({ statusCode: 429, code: 'too_many_consumers' });
    first();
    first();
    expect(quota.held(ana)).toEqual({ streams: 1, consumers: 1 });
    expect(() => quota.take(ana, 'streams')).not.toThrow();
    expect(() => quota.take(ana, 'streams')).toThrow(TooManyStreams);
  });

  it('names the flag that set the cap, as troupe up --gateway names it', () => {
    const quota = new StreamQuota({ streams: 1 }, { streams: '--gateway-max-streams' });
    quota.take(ana, 'streams');
    expect(() => quota.take(ana, 'streams')).toThrow(/its cap \(--gateway-max-streams\)/);
    expect(() => new StreamQuota({ streams: 0 }).check(ana, 'streams')).toThrow(/its cap \(--max-streams\)/);
  });
});

describe('TaskIds', () => {
  it('makes the same id of the same token and key under one secret, and another under another', () => {
    const one = new TaskIds('s'.repeat(32));
    expect(one.fromKey('ci', 'k1')).toBe(new TaskIds('s'.repeat(32)).fromKey('ci', 'k1'));
    expect(one.fromKey('ci', 'k1')).toMatch(/^k-[A-Za-z0-9_-]{32}$/);
    expect(one.fromKey('ci', 'k1')).not.toBe(one.fromKey('ops', 'k1'));
    expect(one.fromKey('ci', 'k1')).not.toBe(new TaskIds('t'.repeat(32)).fromKey('ci', 'k1'));
    expect(() => new TaskIds('short')).toThrow(/needs 32/);
  });

  it('makes a secret file once, for its owner only, and gateways starting together read the same', async () => {
    const file = join(dir, 'secret');
    const secrets = await Promise.all([1, 2, 3, 4].map(() => loadOrCreateSecret(file)));
    expect(new Set(secrets).size).toBe(1);
    expect((await readFile(file, 'utf8')).trim()).toBe(secrets[0]);
    expect((await stat(file)).mode & 0o077).toBe(0);
    await writeFile(join(dir, 'weak'), 'abc\n');
    await expect(loadOrCreateSecret(join(dir, 'weak'))).rejects.toThrow(/needs at least 32/);
  });
});

describe('tokens read again', () => {
  const entry = (name: string, token: string, scopes: string[] = ['read']) => ({
    name,
    sha256: hashToken(token),
    scopes,
  });
  const write = (file: string, entries: unknown[]) => writeFile(file, JSON.stringify({ tokens: entries }));

  it('takes a changed file, tells its listeners, and no longer holds a revoked or narrowed token', async () => {
    const file = join(dir, 'tokens-a.json');
    await write(file, [entry('ana', 'ana-token-0123456789'), entry('bo', 'bo-token-0123456789', ['admin'])]);
    const store = await TokenStore.load(file, { TROUPE_GATEWAY_TOKEN: 'env-token-0123456789' });
    const ana = store.authenticate('Bearer ana-token-0123456789');
    const bo = store.authenticate('Bearer bo-token-0123456789');
    let changes = 0;
    store.onChange(() => changes++);
    expect(await store.reload()).toBe(false);
    await write(file, [entry('bo', 'bo-token-0123456789', ['read'])]);
    expect(await store.reload()).toBe(true);
    expect(changes).toBe(1);
    expect(store.holds(ana)).toBe(false);
    expect(store.holds(bo)).toBe(false);
    expect(store.holds(store.authenticate('Bearer bo-token-0123456789'))).toBe(true);
    expect(() => store.authenticate('Bearer ana-token-0123456789')).toThrow(AuthRefusal);
    // The environment's token is kept across reloads.
    expect(store.authenticate('Bearer env-token-0123456789').name).toBe('env');
  });

  it('keeps the tokens it has when the file is broken, says why once, and takes the file once it is mended', async () => {
    const file = join(dir, 'tokens-b.json');
    await write(file, [entry('ana', 'ana-token-0123456789')]);
    const store = await TokenStore.load(file, {});
    const lines: string[] = [];
    const stop = watchTokens(
      store,
      createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } }),
      20,
    );
    try {
      await writeFile(file, 'tokens: [ {');
      await expect.poll(() => lines.filter((l) => l.includes('tokens file unchanged in use')).length).toBe(1);
      expect(store.authenticate('Bearer ana-token-0123456789').name).toBe('ana');
      await write(file, [entry('cy', 'cy-token-0123456789')]);
      await expect.poll(() => lines.some((l) => l.includes('tokens reloaded'))).toBe(true);
      expect(() => store.authenticate('Bearer ana-token-0123456789')).toThrow(AuthRefusal);
      expect(lines.filter((l) => l.includes('tokens file unchanged in use')).length).toBe(1);
    } finally {
      stop();
    }
  });
});
