/**
 * taskTrace's `--summary`: one task's NATS messages grouped by what they are for, with counts, and the longest run
 * of round trips the trace shows in a row (each sent only after the one before it was answered), which bounds how
 * many waits in a row the task's critical path can hold. Replies are matched to what they answer by their inbox, so a
 * PubAck counts under its event and a KV reply under its write.
 */
import { FINAL_EVENT_KINDS } from '@troupe/protocol';

/** One message as the observer saw it. */
export interface TracedMessage {
  at: number;
  subject: string;
  reply: string | undefined;
  size: number;
  /** The message's body, only when it is small (an event's kind, an ack's verb, a heartbeat's flag). */
  text: string | undefined;
  /** `Nats-Expected-Last-Subject-Sequence`, which tells a KV create (0) from an update. */
  expectedSeq: string | undefined;
}

interface Classified {
  group: string;
  /** A message that asks for an answer: its answer closes a round trip. */
  asks: boolean;
}

const kvKey = (subject: string) => subject.split('.').slice(1).join('.');

/** What a message without a reply-to inbox of its own, or a request, is for. */
const classify = (m: TracedMessage): Classified => {
  const s = m.subject;
  if (m.reply?.startsWith('$JS.ACK.')) return { group: 'task message delivered (pull)', asks: false };
  if (s.startsWith('troupe.tasks.')) return { group: 'submission (plain publish)', asks: Boolean(m.reply) };
  if (s.startsWith('$JS.API.CONSUMER.MSG.NEXT.'))
    return { group: 'pull request (tasks consumer)', asks: false };
  if (s.startsWith('$JS.ACK.')) return { group: `task message ${m.text ?? '?'}`, asks: Boolean(m.reply) };
  if (s.startsWith('$KV.')) {
    const bucket = s.split('.')[1] ?? '?';
    const write = m.expectedSeq === '0' ? 'create' : m.expectedSeq ? 'update' : 'put';
    const what = bucket === 'journal' ? journalKind(kvKey(s)) : '';
    return { group: `KV ${bucket} ${write}${what}`, asks: Boolean(m.reply) };
  }
  if (s.startsWith('$JS.API.DIRECT.GET.') || s.startsWith('$JS.API.STREAM.MSG.GET.')) {
    const key = s.split('.').slice(5).join('.') || m.text || '?';
    return { group: `KV get ${s.split('.')[4] ?? '?'}${journalKind(key)}`, asks: true };
  }
  if (s.startsWith('troupe.events.') && s.endsWith('.batch')) {
    return { group: 'event batch (JetStream publish)', asks: Boolean(m.reply) };
  }
  if (s.startsWith('troupe.events.')) {
    const kind = m.text?.match(/"kind":"([^"]+)"/)?.[1] ?? s.split('.').at(-1);
    return { group: `event ${kind} (JetStream publish)`, asks: Boolean(m.reply) };
  }
  if (s.startsWith('troupe.agents.')) return { group: 'step request', asks: true };
  if (s.startsWith('$JS.API.'))
    return { group: `JetStream API ${s.split('.').slice(2, 4).join('.')}`, asks: true };
  return { group: s.startsWith('_INBOX') ? 'inbox message, unmatched' : s, asks: Boolean(m.reply) };
};

/** The journal's keys say what they hold: `<step>.<turn>.model`, `<step>.<turn>.<call index>`, `<task>.people`. */
const journalKind = (key: string) => {
  const parts = key.split('.');
  if (parts.at(-1) === 'model') return ' (model reply)';
  if (/^\d+$/.test(parts.at(-1) ?? '') && /^\d+$/.test(parts.at(-2) ?? '')) return ' (tool call)';
  if (parts.at(-1) === 'people') return ' (people)';
  return ` (${parts.slice(1).join('.') || key})`;
};

const answerName = (asked: string, m: TracedMessage) => {
  if (asked === 'step request') return m.text?.includes('"heartbeat":true') ? 'step heartbeat' : 'step reply';
  if (asked.startsWith('event ')) return `${asked.replace(' (JetStream publish)', '')} PubAck`;
  if (asked === 'pull request (tasks consumer)') return 'task message delivered';
  return `${asked} reply`;
};

/**
 * The longest chain of `trips`, each sent after the one before it was answered (earliest answer first, the classic
 * interval schedule). A critical path of waits in a row is such a chain, so its length is at most this.
 */
const chainOf = (trips: Trip[], started: number, label: string, keep: (t: Trip) => boolean) => {
  const chain: Trip[] = [];
  for (const trip of trips.filter(keep).sort((a, b) => a.answered - b.answered)) {
    const previous = chain.at(-1);
    if (!previous || trip.sent >= previous.answered) chain.push(trip);
  }
  const waited = chain.reduce((sum, t) => sum + (t.answered - t.sent), 0);
  const lines = [
    `${chain.length} in a row ${label} (each sent after the one before it was answered), ${waited.toFixed(2)} ms waiting:`,
  ];
  for (const t of chain) {
    lines.push(
      `  ${(t.sent - started).toFixed(2).padStart(7)} → ${(t.answered - started).toFixed(2).padStart(7)}  ` +
        `(${(t.answered - t.sent).toFixed(2)} ms)  ${t.what}`,
    );
  }
  return lines;
};

interface Trip {
  what: string;
  sent: number;
  answered: number;
}

export const summarize = (seen: TracedMessage[], started: number): string[] => {
  const counts = new Map<string, number>();
  const count = (group: string) => counts.set(group, (counts.get(group) ?? 0) + 1);
  /** Inbox → what was asked and when; a step request's inbox takes heartbeats and then its reply. */
  const open = new Map<string, { what: string; sent: number }>();
  const trips: Trip[] = [];
  for (const m of seen) {
    const asked = open.get(m.subject);
    if (asked) {
      const name = answerName(asked.what, m);
      count(name);
      // A heartbeat is itself a request to the step's inbox; the step's reply closes the step's trip.
      if (name === 'step heartbeat') {
        if (m.reply) open.set(m.reply, { what: name, sent: m.at });
        continue;
      }
      open.delete(m.subject);
      // A pull request waits for work; it is not a round trip the task chose to make.
      if (asked.what !== 'pull request (tasks consumer)') {
        trips.push({ what: asked.what, sent: asked.sent, answered: m.at });
      }
      continue;
    }
    const { group } = classify(m);
    count(group);
    // What a batch carries, counted apart: events, not messages.
    if (group === 'event batch (JetStream publish)') {
      for (const [, kind] of m.text?.matchAll(/"kind":"([^"]+)"/g) ?? [])
        count(`  in a batch: event ${kind}`);
    }
    // A delivered task message carries its ack subject as reply; the acks are fire-and-forget.
    if (m.reply && !m.reply.startsWith('$JS.ACK.')) open.set(m.reply, { what: group, sent: m.at });
  }
  const lines = [`${seen.length} messages, by what they are for:`];
  for (const [group, n] of [...counts].sort((a, b) => a[0].localeCompare(b[0]))) {
    lines.push(`${String(n).padStart(4)}  ${group}`);
  }
  for (const [, left] of open) lines.push(`   ?  ${left.what}: no answer seen`);
  lines.push(`${trips.length} round trips answered.`);

  lines.push(...chainOf(trips, started, 'of all round trips', () => true));
  // The outbox publishes events without the task waiting on their PubAcks, save the final event's (docs/durability.md
  // "Ending"); heartbeats go beside the step. Left out, the chain is the trace's best guess at the critical path.
  lines.push(
    ...chainOf(trips, started, 'without events (but the final one) and heartbeats', (t) =>
      t.what.startsWith('event ')
        ? FINAL_EVENT_KINDS.some((kind) => t.what === `event ${kind} (JetStream publish)`)
        : t.what !== 'step heartbeat',
    ),
  );
  return lines;
};
