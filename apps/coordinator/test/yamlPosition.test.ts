import { describe, expect, it } from 'vitest';
import { LineCounter, parseDocument } from 'yaml';
import { offsetOf, positionAt, positionOf } from '../src/config/yamlPosition.ts';

const TEXT = `name: notes
cases:
  - id: one
    goal: Write it.
  - id: two
`;

function parsed() {
  const lines = new LineCounter();
  return { doc: parseDocument(TEXT, { lineCounter: lines }), lines };
}

describe('where a path is in a YAML text (pipeline files and dataset files)', () => {
  it("is a map entry's key, an item's node, and the deepest part that exists for what does not", () => {
    const { doc, lines } = parsed();
    expect(positionOf(doc, lines, ['cases', 0, 'goal'])).toEqual({ line: 4, column: 5 });
    expect(positionOf(doc, lines, ['cases', 1])).toEqual({ line: 5, column: 5 });
    // `expected` is not there, nor a third case: each is shown where its parent starts.
    expect(positionOf(doc, lines, ['cases', 1, 'expected'])).toEqual({ line: 5, column: 5 });
    expect(positionOf(doc, lines, ['cases', 2, 'goal'])).toEqual({ line: 2, column: 1 });
    expect(positionOf(doc, lines, [])).toEqual({ line: 1, column: 1 });
  });

  it('gives a key offset, not its value, and none for a path that is not there', () => {
    const { doc, lines } = parsed();
    expect(offsetOf(doc, ['name'])).toBe(0);
    expect(offsetOf(doc, ['cases', 0, 'id'])).toBe(TEXT.indexOf('id: one'));
    expect(offsetOf(doc, ['missing'])).toBeUndefined();
    expect(positionAt(lines, TEXT.indexOf('two'))).toEqual({ line: 5, column: 9 });
  });

  it('is undefined in an empty document', () => {
    const lines = new LineCounter();
    expect(positionOf(parseDocument('', { lineCounter: lines }), lines, ['name'])).toBeUndefined();
  });
});
