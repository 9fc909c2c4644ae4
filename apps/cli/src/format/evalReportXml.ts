/**
 * Text as XML 1.0 character data or an attribute's value: the five markup characters escaped, and the characters
 * XML 1.0 cannot carry at all (most control characters, lone surrogates) replaced by U+FFFD, so a model's output
 * never makes a JUnit report unreadable.
 *
 * @example
 * xmlEscape('a < b & "c"'); // 'a &lt; b &amp; &quot;c&quot;'
 */
export function xmlEscape(text: string): string {
  return text.replace(NOT_XML, '\uFFFD').replace(MARKUP, (c) => ENTITIES[c] ?? c);
}

const NOT_XML = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;
const MARKUP = /[&<>"']/g;
const ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
};

/** An element with its attributes (undefined ones left out) and children, or self-closed without children. */
export function xmlElement(
  name: string,
  attributes: Readonly<Record<string, string | number | undefined>>,
  children: readonly string[] = [],
  indent = '',
): string {
  const attrs = Object.entries(attributes)
    .filter((entry): entry is [string, string | number] => entry[1] !== undefined)
    .map(([key, value]) => ` ${key}="${xmlEscape(String(value))}"`)
    .join('');
  if (children.length === 0) return `${indent}<${name}${attrs}/>`;
  return `${indent}<${name}${attrs}>\n${children.join('\n')}\n${indent}</${name}>`;
}

/** An element holding text. */
export function xmlText(
  name: string,
  attributes: Readonly<Record<string, string | number | undefined>>,
  text: string,
  indent = '',
): string {
  const open = xmlElement(name, attributes).slice(0, -2);
  return `${indent}${open}>${xmlEscape(text)}</${name}>`;
}

export const XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>';

/** Seconds, as JUnit's `time` attributes take them. */
export const junitSeconds = (ms: number): string => (ms / 1000).toFixed(3);
