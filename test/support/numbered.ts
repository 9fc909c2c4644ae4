/** Text of `bytes` bytes that is not one byte repeated, so a chunk out of place would show. */
export const numbered = (tag: string, bytes: number): string =>
  Array.from({ length: Math.ceil(bytes / 16) }, (_, i) => `${tag}${String(i).padStart(14, '0')}\n`)
    .join('')
    .slice(0, bytes);
