/** Text cut to a byte budget, with the original size when it was cut. */
export interface TruncatedText {
  text: string;
  originalBytes?: number;
}

/** Cuts `text` to at most `maxBytes` of UTF-8, never splitting a character, and appends a visible marker. */
export function truncateOutput(text: string, maxBytes: number): TruncatedText {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return { text };
  const head = utf8Head(bytes, maxBytes);
  const cut = Buffer.byteLength(head, 'utf8');
  return {
    text: `${head}\n…[truncated: ${bytes.length} bytes total, showing first ${cut}]`,
    originalBytes: bytes.length,
  };
}

/** The longest start of `bytes` (UTF-8) within `maxBytes` that splits no character, as text. */
export function utf8Head(bytes: Uint8Array, maxBytes: number): string {
  if (bytes.length <= maxBytes) return Buffer.from(bytes).toString('utf8');
  let cut = maxBytes;
  // Step back over continuation bytes (10xxxxxx) to the start of the character the budget splits.
  while (cut > 0 && ((bytes[cut] ?? 0) & 0xc0) === 0x80) cut -= 1;
  return Buffer.from(bytes.subarray(0, cut)).toString('utf8');
}
