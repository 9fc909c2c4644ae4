/**
 * `each` of every item, at most `limit` at once: each of `limit` workers takes the next item not yet taken as soon as
 * it is free, so the items start in order. Answers what `each` gave, in the items' order; a rejection of `each` is
 * passed on at once.
 *
 * @example
 * const entries = await mapLimit(keys, 32, (key) => store.get(key));
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  each: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const at = next++;
      results[at] = await each(items[at] as T, at);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
