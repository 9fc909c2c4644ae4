import { type Document, isMap, isNode, isScalar, type LineCounter } from 'yaml';

/** A place in a YAML text, from 1. */
export interface YamlPosition {
  line: number;
  column: number;
}

/**
 * Where the deepest key or item on `path` that exists in the document starts: a problem with a value that is not
 * there (a required key left out) is shown at its parent. Undefined only when the document has no contents.
 */
export function positionOf(
  doc: Document,
  lines: LineCounter,
  path: readonly PropertyKey[],
): YamlPosition | undefined {
  for (let depth = path.length; depth >= 0; depth--) {
    const offset = offsetOf(doc, path.slice(0, depth));
    if (offset !== undefined) return positionAt(lines, offset);
  }
  return undefined;
}

/** The line and column of an offset in the text the line counter counted. */
export function positionAt(lines: LineCounter, offset: number): YamlPosition {
  const { line, col } = lines.linePos(offset);
  return { line, column: col };
}

/** Where a path starts in the text: at its key for a map entry (not its value), else at the node. */
export function offsetOf(doc: Document, path: readonly PropertyKey[]): number | undefined {
  const last = path.at(-1);
  if (typeof last === 'string') {
    const parent = path.length === 1 ? doc.contents : doc.getIn(path.slice(0, -1) as unknown[], true);
    if (isMap(parent)) {
      const pair = parent.items.find((item) => isScalar(item.key) && item.key.value === last);
      if (pair && isNode(pair.key) && pair.key.range) return pair.key.range[0];
    }
  }
  const node = path.length === 0 ? doc.contents : doc.getIn(path as unknown[], true);
  return isNode(node) && node.range ? node.range[0] : undefined;
}
