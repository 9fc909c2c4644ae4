/** An element parsed back from XML: its name, attributes (entities decoded), children and text. */
export interface XmlNode {
  name: string;
  attributes: Record<string, string>;
  children: XmlNode[];
  text: string;
}

const ENTITY = /&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/g;
const NAMED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function decode(text: string, where: number): string {
  if (/&(?!(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)/.test(text)) throw new Error(`a bare & at ${where}`);
  return text.replace(ENTITY, (_, e: string) =>
    e.startsWith('#x')
      ? String.fromCodePoint(Number.parseInt(e.slice(2), 16))
      : e.startsWith('#')
        ? String.fromCodePoint(Number(e.slice(1)))
        : (NAMED[e] ?? ''),
  );
}

/**
 * A strict reader of the XML our reports write (no DTD, CDATA, comments or processing instructions beyond the
 * declaration): it throws on anything not well-formed — a tag closed out of order, a bare `<` or `&`, an attribute
 * without quotes, a character XML 1.0 cannot carry, text outside the one root element.
 */
export function parseXml(xml: string): XmlNode {
  if (/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u.test(xml))
    throw new Error('a character XML 1.0 cannot carry');
  let at = 0;
  const declaration = /^<\?xml [^?]*\?>\s*/.exec(xml);
  if (declaration) at = declaration[0].length;
  const stack: XmlNode[] = [];
  let root: XmlNode | undefined;
  const tag = /<(\/?)([A-Za-z_][\w.-]*)((?:\s+[A-Za-z_][\w.-]*="[^"<]*")*)\s*(\/?)>/y;
  while (at < xml.length) {
    const lt = xml.indexOf('<', at);
    const text = xml.slice(at, lt === -1 ? xml.length : lt);
    if (text !== '') {
      const top = stack.at(-1);
      if (!top) {
        if (text.trim() !== '') throw new Error(`text outside the root at ${at}`);
      } else {
        top.text += decode(text, at);
      }
    }
    if (lt === -1) break;
    tag.lastIndex = lt;
    const match = tag.exec(xml);
    if (!match) throw new Error(`a malformed tag at ${lt}: ${xml.slice(lt, lt + 40)}`);
    const [whole, closing, name = '', attrs = '', selfClosing] = match;
    at = lt + whole.length;
    if (closing) {
      const open = stack.pop();
      if (open?.name !== name) throw new Error(`</${name}> closes <${open?.name}> at ${lt}`);
      continue;
    }
    const attributes: Record<string, string> = {};
    for (const [, key = '', value = ''] of attrs.matchAll(/([A-Za-z_][\w.-]*)="([^"]*)"/g)) {
      if (key in attributes) throw new Error(`attribute ${key} twice at ${lt}`);
      attributes[key] = decode(value, lt);
    }
    const node: XmlNode = { name, attributes, children: [], text: '' };
    const parent = stack.at(-1);
    if (parent) parent.children.push(node);
    else if (root) throw new Error(`a second root <${name}> at ${lt}`);
    else root = node;
    if (!selfClosing) stack.push(node);
  }
  if (stack.length > 0) throw new Error(`<${stack.at(-1)?.name}> is never closed`);
  if (!root) throw new Error('no root element');
  return root;
}

/** Every descendant element named `name`, in document order. */
export function elements(node: XmlNode, name: string): XmlNode[] {
  return node.children.flatMap((c) => [...(c.name === name ? [c] : []), ...elements(c, name)]);
}
