/**
 * Secrets never leave the process: API keys, tokens, passwords and `Authorization` headers are replaced by
 * `[redacted]` in log lines, events, spans and error messages. Two nets catch them:
 *
 * - **known values**: every secret the process uses is registered as it is read (a model's API key, an MCP
 *   server's `${VAR}` values), and so is every environment variable whose name ends like a secret's (`*_KEY`,
 *   `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, `*_CREDENTIALS`, …) — wherever the value turns up, in whatever text, it is
 *   replaced;
 * - **shapes**: `Bearer <token>`, `Basic <credentials>`, provider keys (`sk-…`, `sk-ant-…`), NATS seeds (`SU…`,
 *   `SA…`, `SO…`), gateway tokens (`trp_…`), `access_token=` in URLs and `user:password@` in URLs, for secrets
 *   nobody registered.
 */

export const REDACTED = '[redacted]';

/** Shorter values are not registered: they would match ordinary text. */
const MIN_SECRET_LENGTH = 8;
/** A value shorter than this is registered only with a digit or a symbol in it (`postgres` is a word, not a key). */
const PLAIN_WORD_LENGTH = 16;

/** Environment variables whose names say they hold a secret: the name ends so. */
const SECRET_NAME =
  /(?:^|_)(?:API_?KEY|SECRET_?KEY|ACCESS_?KEY|PRIVATE_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$/i;

/** Characters that end a URL's userinfo or a token in JSON, prose or a header. */
const SHAPES: readonly { pattern: RegExp; replace: string }[] = [
  // A token is long and has a digit in it: `Basic functionality` and `Bearer well-formed` are prose.
  {
    pattern: /\b(Bearer|Basic)\s+(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,}/g,
    replace: `$1 ${REDACTED}`,
  },
  { pattern: /\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}/g, replace: REDACTED },
  { pattern: /\bS[UAO][A-Z2-7]{56}\b/g, replace: REDACTED },
  // The gateway's own tokens, and any token a URL carries as `access_token=` (a browser's event stream does).
  { pattern: /\btrp_[A-Za-z0-9_-]{20,}/g, replace: REDACTED },
  { pattern: /\baccess_token=[^&\s"'#]+/g, replace: `access_token=${REDACTED}` },
  // `scheme://user:password@`: neither part crosses a quote, a bracket, a comma or whitespace.
  {
    pattern: /(\b[a-z][a-z0-9+.-]{0,20}:\/\/[^\s:/@"'<>{}[\],;]{1,200}):[^\s@/"'<>{}[\],;]{1,200}@/gi,
    replace: `$1:${REDACTED}@`,
  },
];
/** A cheap look before the shapes are tried: none of them can match text without one of these. */
const SHAPE_HINT = /Bearer|Basic|sk-|trp_|access_token=|S[UAO][A-Z2-7]{20}|:\/\/[^\s/@]+@/;

const known = new Set<string>();
let knownPattern: RegExp | undefined;

const literally = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Registers a secret value: from now on it is redacted wherever it appears. Short or empty values are ignored. */
export function registerSecret(value: string | undefined): void {
  if (value === undefined || value.length < MIN_SECRET_LENGTH || known.has(value)) return;
  if (value.length < PLAIN_WORD_LENGTH && /^[A-Za-z]+$/.test(value)) return;
  known.add(value);
  // Longest first, so a secret that contains another is replaced whole.
  const alternatives = [...known].sort((a, b) => b.length - a.length).map(literally);
  knownPattern = new RegExp(alternatives.join('|'), 'g');
}

/** Registers every variable of `env` whose name says it holds a secret (`OPENAI_API_KEY`, `GITHUB_TOKEN`, …). */
export function registerSecretsFromEnv(
  env: Readonly<Record<string, string | undefined>> = process.env,
): void {
  for (const [name, value] of Object.entries(env)) if (SECRET_NAME.test(name)) registerSecret(value);
}

/** The text with every registered secret, and everything shaped like one, replaced by `[redacted]`. */
export function redactSecrets(text: string): string {
  let out = text;
  if (knownPattern) {
    knownPattern.lastIndex = 0;
    if (knownPattern.test(out)) {
      knownPattern.lastIndex = 0;
      out = out.replace(knownPattern, REDACTED);
    }
  }
  if (!SHAPE_HINT.test(out)) return out;
  for (const { pattern, replace } of SHAPES) out = out.replace(pattern, replace);
  return out;
}

/** How deep `redactDeep` walks: log fields and event data are shallow; deeper is not ours. */
const MAX_DEPTH = 32;

/**
 * A copy of `value` with every string in it redacted (plain objects, null-prototype objects and arrays walked;
 * a `URL` becomes its redacted text; other values kept); `value` itself when nothing needed redacting, so the common
 * case allocates nothing. A cycle, or more than 32 levels, is left as it is beyond that point.
 */
export function redactDeep<T>(value: T): T {
  return walk(value, new WeakSet(), 0) as T;
}

function walk(value: unknown, seen: WeakSet<object>, depth: number): unknown {
  if (typeof value === 'string') return redactSecrets(value);
  if (value === null || typeof value !== 'object' || depth >= MAX_DEPTH || seen.has(value)) return value;
  if (value instanceof URL) {
    const text = redactSecrets(value.href);
    return text === value.href ? value : text;
  }
  const proto = Object.getPrototypeOf(value);
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) return value;
  seen.add(value);
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const redacted = walk(item, seen, depth + 1);
      if (redacted !== item) {
        copy ??= [...value];
        copy[i] = redacted;
      }
    });
    return copy ?? value;
  }
  let copy: Record<string, unknown> | undefined;
  for (const [key, item] of Object.entries(value)) {
    const redacted = walk(item, seen, depth + 1);
    if (redacted !== item) {
      copy ??= { ...(value as Record<string, unknown>) };
      copy[key] = redacted;
    }
  }
  return copy ?? value;
}

/** Forgets every registered secret (tests). */
export function forgetSecrets(): void {
  known.clear();
  knownPattern = undefined;
}
