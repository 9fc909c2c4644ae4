/** Text cut to a byte budget, with the original size when it was cut. */
export interface TruncatedText {
  text: string;
  originalBytes?: number;
}

/** Cuts `text` to at most `maxBytes` of UTF-8, never splitting a character, and appends a visible marker. */
export function truncateOutput(text: string, maxBytes: number): TruncatedText {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return { text };
  let cut = maxBytes;
  // Step back over continuation bytes (10xxxxxx) to the start of the character the budget splits.
  while (cut > 0 && ((bytes[cut] ?? 0) & 0xc0) === 0x80) cut -= 1;
  const head = bytes.subarray(0, cut).toString('utf8');
  return {
    text: `${head}\n…[truncated: ${bytes.length} bytes total, showing first ${cut}]`,
    originalBytes: bytes.length,
  };
}
