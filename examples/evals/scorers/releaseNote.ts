// A custom scorer for the evals walk-through (docs/evals.md): a dataset names this file in a `module` scorer
// (`{ type: module, path: ./scorers/releaseNote.ts, options: { minWords: 8 } }`, the path read from the dataset
// file's folder), and `troupe eval run` loads it, TypeScript included, and calls `score` once per case.
// It reads what the writer wrote with write_file from the run's events: half the score for a Markdown title,
// half for a body of at least `minWords` words.

import type { ScorerModule } from '@troupe/coordinator';
import type { EventOf } from '@troupe/protocol';

export const score: ScorerModule['score'] = (run, options) => {
  const minWords = typeof options.minWords === 'number' ? options.minWords : 8;
  const written = run.events
    .filter((event): event is EventOf<'tool.result'> => event.kind === 'tool.result')
    .find((result) => result.data.tool === 'write_file' && result.data.ok);
  if (!written) return { value: 0, reason: 'no file was written' };
  const call = run.events.find(
    (event): event is EventOf<'tool.call'> =>
      event.kind === 'tool.call' && event.data.callId === written.data.callId,
  );
  const content = contentOf(call?.data.arguments);
  if (content === undefined) return { value: 0, reason: 'the write_file call kept no readable content' };
  const [first = '', ...rest] = content.trim().split('\n');
  const titled = first.startsWith('# ');
  const words = rest.join(' ').split(/\s+/).filter(Boolean).length;
  const value = (titled ? 0.5 : 0) + (words >= minWords ? 0.5 : 0);
  return {
    value,
    reason: `${titled ? 'a title' : 'no title'}; ${words} word(s) of body, ${minWords} wanted`,
  };
};

/** The `content` argument of a write_file call, or undefined when the event kept only the start of it. */
function contentOf(args: string | undefined): string | undefined {
  try {
    const parsed: unknown = JSON.parse(args ?? '');
    const content = (parsed as { content?: unknown } | null)?.content;
    return typeof content === 'string' ? content : undefined;
  } catch {
    return undefined;
  }
}
