/** A Markdown table cell: pipes escaped, lines joined, HTML's angle brackets kept as text. */
export function markdownCell(text: string): string {
  return text.replace(/\r?\n/g, ' ').replace(/\|/g, '\\|').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** A Markdown table: a header, its alignment row (`right` columns aligned right) and the rows. */
export function markdownTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  right: readonly number[] = [],
): string[] {
  const line = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  return [
    line(header),
    line(header.map((_, i) => (right.includes(i) ? '---:' : '---'))),
    ...rows.map((row) => line(row.map(markdownCell))),
  ];
}

/** Text cut to `max` characters with an ellipsis, on one line. */
export const oneLine = (text: string, max: number): string => {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};
