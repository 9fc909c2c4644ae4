/**
 * Secrets never leave the process: API keys, tokens, passwords and `Authorization` headers are replaced by
 * `[redacted]` in log lines, events, spans and error messages. Two nets catch them:
 *
 * - **known values**: every secret the process uses is registered as it is read (a model's API key, an MCP
 *   server's `${VAR}` values, the password in a NATS URL), and so is every environment variable whose name says it
 *   holds one (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`, `*_CREDENTIALS`) — wherever the value turns up, in
 *   whatever text, it is replaced;
 * - **shapes**: `Bearer <token>`, `Basic <credentials>`, provider keys (`sk-…`, `sk-ant-…`), NATS seeds (`SU…`,
 *   `SA…`, `SO…`) and `user:password@` in URLs, for secrets nobody registered.
 */

export const REDACTED = '[redacted]';

/** Shorter values are not registered: they would match ordinary text. */
const MIN_SECRET_LENGTH = 8;

/** Environment variables whose names say they hold a secret. */
const SECRET_NAME = /(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(?:_|$)/i;

const SHAPES: readonly { pattern: RegExp; replace: string }[] = [
  // A token has a digit or a symbol in it: `Bearer authentication` is prose, `Bearer eyJ0eXAi…` is not.
  {
    pattern: /\b(Bearer|Basic)\s+(?=[A-Za-z0-9._~+/=-]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}/g,
    replace: `$1 ${REDACTED}`,
  },
  { pattern: /\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}/g, replace: REDACTED },
  { pattern: /\bS[UAO][A-Z2-7]{56}\b/g, replace: REDACTED },
  { pattern: /(\b[a-z][a-z0-9+.-]*:\/\/[^\s:/@]+):[^\s@/]+@/gi, replace: `$1:${REDACTED}@` },
];
/** A cheap look before the shapes are tried: none of them can match text without one of these. */
const SHAPE_HINT = /Bearer|Basic|sk-|S[UAO][A-Z2-7]{20}|:\/\/[^\s/@]+@/;

const known = new Set<string>();
let knownPattern: RegExp | undefined;

const literally = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Registers a secret value: from now on it is redacted wherever it appears. Short or empty values are ignored. */
export function registerSecret(value: string | undefined): void {
  if (value === undefined || value.length < MIN_SECRET_LENGTH || known.has(value)) return;
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

/**
 * A copy of `value` with every string in it redacted (objects and arrays walked; other values kept); `value` itself
 * when nothing needed redacting, so the common case allocates nothing.
 */
export function redactDeep<T>(value: T): T {
  if (typeof value === 'string') return redactSecrets(value) as T;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const redacted = redactDeep(item);
      if (redacted !== item) {
        copy ??= [...value];
        copy[i] = redacted;
      }
    });
    return (copy ?? value) as T;
  }
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    let copy: Record<string, unknown> | undefined;
    for (const [key, item] of Object.entries(value)) {
      const redacted = redactDeep(item);
      if (redacted !== item) {
        copy ??= { ...(value as Record<string, unknown>) };
        copy[key] = redacted;
      }
    }
    return (copy ?? value) as T;
  }
  return value;
}

/** Forgets every registered secret (tests). */
export function forgetSecrets(): void {
  known.clear();
  knownPattern = undefined;
}
