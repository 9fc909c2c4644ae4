import { describe, expect, it } from 'vitest';
import { alignColumns } from '../src/format/table.ts';

describe('alignColumns', () => {
  it('lines up columns two spaces apart, numbers on the right, the last column unpadded', () => {
    const lines = alignColumns(
      [
        ['TASK', 'ROUNDS', 'AGE'],
        ['rel-10', '2', '3 min 4 s ago'],
        ['r-1', '12', '5 s ago'],
      ],
      { right: [1] },
    );
    expect(lines).toEqual([
      'TASK    ROUNDS  AGE',
      'rel-10       2  3 min 4 s ago',
      'r-1         12  5 s ago',
    ]);
  });
});
