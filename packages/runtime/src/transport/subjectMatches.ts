/**
 * Whether a NATS subject pattern (`*` one token, `>` the rest) matches a subject, token by token: for MemoryBus's
 * subscriptions and MemoryKv's key filters, as NATS matches both.
 */
export function subjectMatches(pattern: readonly string[], subject: readonly string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    const token = pattern[i];
    if (token === '>') return subject.length > i;
    if (i >= subject.length || (token !== '*' && token !== subject[i])) return false;
  }
  return pattern.length === subject.length;
}
