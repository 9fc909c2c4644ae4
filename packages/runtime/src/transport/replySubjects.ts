import { subjects } from '@troupe/protocol';

/**
 * Whether a peer's reply subject is where a client hears answers, and so one this process may answer on: a NATS inbox
 * (`_INBOX.…`, Troupe's own `troupe._inbox.…`), or the reply subject a server maps a request to across accounts
 * (`_R_.…`). A subject that acts when published to (`$JS.API.STREAM.PURGE.…`, a task's subject) is none: a peer
 * allowed to send to this process's inboxes could otherwise make it publish there under its own permissions.
 */
export function isReplySubject(subject: string): boolean {
  return (
    subject.startsWith('_INBOX.') ||
    subject.startsWith(`${subjects.inboxPrefix}.`) ||
    subject.startsWith('_R_.')
  );
}
