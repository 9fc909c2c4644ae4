const UNIT_BYTES: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  k: 1_000,
  kb: 1_000,
  kib: 1_024,
  m: 1_000_000,
  mb: 1_000_000,
  mib: 1_048_576,
  g: 1_000_000_000,
  gb: 1_000_000_000,
  gib: 1_073_741_824,
  t: 1_000_000_000_000,
  tb: 1_000_000_000_000,
  tib: 1_099_511_627_776,
};

const SIZE = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/;

/**
 * Bytes of a size such as `512MiB`, `2GB`, `1.5g` or `1048576` (decimal units are powers of 1,000, binary ones of
 * 1,024); undefined for anything else, zero included.
 *
 * @example
 * parseSize('512MiB'); // 536_870_912
 */
export function parseSize(text: string): number | undefined {
  const match = SIZE.exec(text.trim().toLowerCase());
  const unit = UNIT_BYTES[match?.[2] ?? 'none'];
  if (!match || unit === undefined) return undefined;
  const bytes = Math.round(Number(match[1]) * unit);
  return bytes > 0 ? bytes : undefined;
}
