import { describe, expect, it } from 'vitest';
import { mapLimit } from '../src/mapLimit.ts';

/** A promise the test settles, and whether it has been asked for. */
function gate() {
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

describe('mapLimit', () => {
  it('runs at most `limit` at once, starts them in order, and answers in the items’ order', async () => {
    const gates = Array.from({ length: 5 }, gate);
    const started: number[] = [];
    let running = 0;
    let most = 0;
    const all = mapLimit([10, 20, 30, 40, 50], 2, async (item, index) => {
      started.push(index);
      running += 1;
      most = Math.max(most, running);
      await gates[index]?.opened;
      running -= 1;
      return item + index;
    });
    await expect.poll(() => started).toEqual([0, 1]);
    // The second finishes first: the next item goes to the worker that is free.
    gates[1]?.open();
    await expect.poll(() => started).toEqual([0, 1, 2]);
    for (const g of gates) g.open();
    expect(await all).toEqual([10, 21, 32, 43, 54]);
    expect(most).toBe(2);
    expect(started).toEqual([0, 1, 2, 3, 4]);
  });

  it('passes a rejection on, and answers an empty list with nothing run', async () => {
    await expect(
      mapLimit([1, 2, 3], 2, async (item) => {
        if (item === 2) throw new Error('two is refused');
        return item;
      }),
    ).rejects.toThrow('two is refused');
    expect(await mapLimit([], 4, async () => 1)).toEqual([]);
  });
});
