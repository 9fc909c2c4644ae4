/**
 * Passes a warning on once, then the same text again only after `everyMs`: a server that looks for the pipelines on
 * every request (or every few seconds) while no coordinator runs says so once a minute, not at every look.
 */
export function withoutRepeats(warn: (message: string) => void, everyMs = 60_000): (message: string) => void {
  const told = new Map<string, number>();
  return (message) => {
    const now = Date.now();
    const last = told.get(message);
    if (last !== undefined && now - last < everyMs) return;
    told.set(message, now);
    // Texts name their cause: a few kinds at most, but drop the old ones all the same.
    if (told.size > 100) for (const [text, at] of told) if (now - at >= everyMs) told.delete(text);
    warn(message);
  };
}
