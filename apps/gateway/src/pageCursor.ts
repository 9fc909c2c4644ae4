/**
 * Where a page of tasks sorted newest first ended: the time it is sorted by and the id of its last task, as the
 * opaque text a client passes back for the next page (the REST API's `cursor`, A2A's `pageToken`).
 */
export interface PagePlace {
  at: string;
  taskId: string;
}

export const encodePlace = ({ at, taskId }: PagePlace): string =>
  Buffer.from(JSON.stringify([at, taskId])).toString('base64url');

/** The place a text this gateway gave names; undefined for any other text, which the caller refuses its own way. */
export function decodePlace(text: string): PagePlace | undefined {
  try {
    const [at, taskId] = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as unknown[];
    if (typeof at === 'string' && typeof taskId === 'string') return { at, taskId };
  } catch {
    // Not one this gateway gave.
  }
  return undefined;
}
