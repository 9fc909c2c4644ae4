/**
 * Rows as lines whose columns line up, two spaces apart; the columns named in `right` are aligned right
 * (numbers), the last column is not padded.
 *
 * @example
 * alignColumns([['TASK', 'ROUNDS'], ['rel-1', '2']], { right: [1] }); // ['TASK   ROUNDS', 'rel-1       2']
 */
export function alignColumns(
  rows: readonly (readonly string[])[],
  options: { right?: number[] } = {},
): string[] {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  const right = new Set(options.right ?? []);
  return rows.map((row) =>
    row
      .map((cell, i) => {
        if (i === row.length - 1 && !right.has(i)) return cell;
        const width = widths[i] ?? 0;
        return right.has(i) ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  '),
  );
}
