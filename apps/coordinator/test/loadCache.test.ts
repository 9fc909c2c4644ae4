import { describe, expect, it } from 'vitest';
import { LoadCache } from '../src/config/loadCache.ts';

describe('a load cache', () => {
  it('shares a load under way, keeps what it found, and loads again after a miss or a failure', async () => {
    const loads: string[] = [];
    let stored: string | undefined;
    let failing = false;
    const cache = new LoadCache<string | undefined>(
      async (key) => {
        loads.push(key);
        if (failing) throw new Error('server gone');
        return stored;
      },
      (value) => value !== undefined,
    );
    expect(await Promise.all([cache.get('a'), cache.get('a')])).toEqual([undefined, undefined]);
    expect(loads).toEqual(['a']);
    failing = true;
    await expect(cache.get('a')).rejects.toThrow('server gone');
    failing = false;
    stored = 'found';
    expect(await cache.get('a')).toBe('found');
    stored = 'changed';
    expect(await cache.get('a')).toBe('found');
    expect(loads).toEqual(['a', 'a', 'a']);
    cache.set('b', 'written here');
    expect(await cache.get('b')).toBe('written here');
    cache.delete('a');
    expect(await cache.get('a')).toBe('changed');
  });
});
