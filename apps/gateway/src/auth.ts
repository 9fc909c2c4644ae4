import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { formatIssues, type TokenEntry, type TokenScope, TokensFile } from '@troupe/protocol';
import { parse as parseYaml } from 'yaml';
import { GatewayError } from './gatewayError.ts';

/** Who made a request, as their token says. */
export interface Principal {
  name: string;
  scopes: readonly TokenScope[];
  pipelines?: readonly string[];
  /** The SHA-256 of the token it authenticated with: a stream stays open only while that token is still valid. */
  tokenSha256?: string;
}

/** Why a request was refused: 401 (no or unknown token) or 403 (the token may not), with the reason. */
export class AuthRefusal extends GatewayError {
  override readonly name = 'AuthRefusal';
  declare readonly code: 'unauthenticated' | 'forbidden';
  readonly status: 401 | 403;

  constructor(status: 401 | 403, message: string) {
    super(status === 401 ? 'unauthenticated' : 'forbidden', status, message);
    this.status = status;
  }
}

export const hashToken = (token: string): string => createHash('sha256').update(token).digest('hex');

/** A new random token, for `troupe gateway token`: 32 random bytes, base64url, prefixed so it is recognisable. */
export const newToken = (): string => `trp_${randomBytes(32).toString('base64url')}`;

export class TokenStore {
  #entries: { entry: TokenEntry; hash: Buffer }[] = [];
  readonly #listeners = new Set<() => void>();
  readonly #file: string | undefined;
  readonly #fromEnv: TokenEntry[];

  /** `file`: where the entries came from, read again by {@link reload}; `fromEnv`: entries kept across reloads. */
  constructor(entries: readonly TokenEntry[], source: { file?: string; fromEnv?: TokenEntry[] } = {}) {
    this.#file = source.file;
    this.#fromEnv = source.fromEnv ?? [];
    this.#set(entries);
  }

  get size(): number {
    return this.#entries.length;
  }

  /** The tokens file, when the tokens came from one. */
  get file(): string | undefined {
    return this.#file;
  }

  /**
   * Tokens from a file (YAML or JSON: `tokens: [{ name, sha256, scopes, pipelines? }]`) and from the environment:
   * `TROUPE_GATEWAY_TOKEN` is an admin token named `env` (hashed as it is read; the variable holds the token itself).
   */
  static async load(file: string | undefined, env: NodeJS.ProcessEnv = process.env): Promise<TokenStore> {
    const fromEnv: TokenEntry[] = [];
    const token = env.TROUPE_GATEWAY_TOKEN;
    if (token) {
      if (token.length < 16)
        throw new Error('TROUPE_GATEWAY_TOKEN is shorter than 16 characters: too easy to guess');
      fromEnv.push({ name: 'env', sha256: hashToken(token), scopes: ['admin'] });
    }
    const fromFile = file === undefined ? [] : await readTokensFile(file);
    return new TokenStore([...fromFile, ...fromEnv], { ...(file === undefined ? {} : { file }), fromEnv });
  }

  /**
   * Reads the tokens file again and, when it says something else, takes its tokens (with the environment's) and
   * tells every listener. Throws, keeping the tokens as they were, when the file cannot be read or is not valid.
   * True when the tokens changed.
   */
  async reload(): Promise<boolean> {
    if (this.#file === undefined) return false;
    const entries = [...(await readTokensFile(this.#file)), ...this.#fromEnv];
    const same =
      entries.length === this.#entries.length &&
      entries.every((e, i) => JSON.stringify(e) === JSON.stringify(this.#entries[i]?.entry));
    if (same) return false;
    this.#set(entries);
    for (const listener of this.#listeners) listener();
    return true;
  }

  /** Calls `listener` each time the tokens change; the function returned stops it. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The principal of an `Authorization: Bearer <token>` header; refuses a missing, malformed or unknown one. */
  authenticate(header: string | undefined): Principal {
    if (!header) throw new AuthRefusal(401, 'no bearer token: send Authorization: Bearer <token>');
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match?.[1]) throw new AuthRefusal(401, 'the Authorization header is not "Bearer <token>"');
    const hash = Buffer.from(hashToken(match[1]), 'hex');
    // Every entry is compared, so the time taken says nothing about which one matched.
    let found: TokenEntry | undefined;
    for (const { entry, hash: known } of this.#entries) if (timingSafeEqual(hash, known)) found = entry;
    if (!found) throw new AuthRefusal(401, 'unknown token');
    return {
      name: found.name,
      scopes: found.scopes,
      ...(found.pipelines ? { pipelines: found.pipelines } : {}),
      tokenSha256: found.sha256,
    };
  }

  /** Whether the principal's token is still here with the same scopes and pipelines (false once revoked or changed). */
  holds(who: Principal): boolean {
    const entry = this.#entries.find((e) => e.entry.name === who.name)?.entry;
    return (
      entry !== undefined &&
      entry.sha256 === who.tokenSha256 &&
      sameList(entry.scopes, who.scopes) &&
      sameList(entry.pipelines, who.pipelines)
    );
  }

  #set(entries: readonly TokenEntry[]): void {
    const names = new Set<string>();
    for (const entry of entries) {
      if (names.has(entry.name)) throw new Error(`two tokens are named ${entry.name}`);
      names.add(entry.name);
    }
    this.#entries = entries.map((entry) => ({ entry, hash: Buffer.from(entry.sha256, 'hex') }));
  }
}

const sameList = (a: readonly string[] | undefined, b: readonly string[] | undefined): boolean =>
  (a ?? []).length === (b ?? []).length && (a ?? []).every((x, i) => x === (b ?? [])[i]);

/** What a scope lets a token do, beyond itself. */
const GRANTS: Record<TokenScope, readonly TokenScope[]> = {
  read: ['read'],
  submit: ['read', 'submit'],
  approve: ['read', 'approve'],
  admin: ['read', 'submit', 'approve', 'admin'],
};

/** Refuses (403) a principal without `scope`, or limited to other pipelines than `pipeline`. */
export function authorize(principal: Principal, scope: TokenScope, pipeline?: string): void {
  if (!principal.scopes.some((s) => GRANTS[s].includes(scope))) {
    throw new AuthRefusal(
      403,
      `token ${principal.name} lacks the ${scope} scope (it has ${principal.scopes.join(', ')})`,
    );
  }
  if (pipeline !== undefined && !mayTouch(principal, pipeline)) {
    throw new AuthRefusal(
      403,
      `token ${principal.name} may not touch pipeline ${pipeline} (only ${principal.pipelines?.join(', ')})`,
    );
  }
}

/** Whether the principal's pipelines include this one (every one when it has no list). */
export const mayTouch = (principal: Principal, pipeline: string): boolean =>
  principal.pipelines === undefined || principal.pipelines.includes(pipeline);

async function readTokensFile(file: string): Promise<TokenEntry[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new Error(`cannot read the tokens file ${file}: ${(error as Error).message}`);
  }
  let data: unknown;
  try {
    data = parseYaml(text);
  } catch (error) {
    throw new Error(`${file}: not YAML or JSON: ${(error as Error).message}`);
  }
  const parsed = TokensFile.safeParse(data ?? { tokens: [] });
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues).map((i) => `${i.path || 'file'}: ${i.message}`);
    throw new Error(`${file}: ${problems.join('; ')}`);
  }
  return parsed.data.tokens;
}
