import { createHmac, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';

/** The fewest characters a secret may have: 32 random base64url characters are 192 bits. */
export const MIN_SECRET_CHARS = 32;

/**
 * Task ids the gateway makes. An idempotency key's id is an HMAC of the token's name and the key under a secret
 * every gateway of a deployment shares: the same key from the same token is the same task on any of them, and no one
 * without the secret can compute it, so no other token can take the id first.
 */
export class TaskIds {
  readonly #secret: Uint8Array;

  constructor(secret: Uint8Array | string) {
    this.#secret = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : secret;
    if (this.#secret.length < MIN_SECRET_CHARS) {
      throw new Error(
        `the gateway's id secret has ${this.#secret.length} bytes; it needs ${MIN_SECRET_CHARS}`,
      );
    }
  }

  /** A random secret, for a gateway given none: its keys' ids hold within this process only. */
  static random(): TaskIds {
    return new TaskIds(randomBytes(32));
  }

  /** The task id of an idempotency key (any characters; a task id may have only some): `k-` and 32 of the HMAC. */
  fromKey(token: string, key: string): string {
    const mac = createHmac('sha256', this.#secret).update(`${token}\n${key}`).digest('base64url');
    return `k-${mac.slice(0, 32)}`;
  }

  /** A fresh task id: time-ordered, subject-safe (as `troupe submit` makes them). */
  fresh(): string {
    return `t-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  }
}

/**
 * The secret in `file`, made (32 random bytes, base64url, readable by its owner only) when the file does not exist.
 * Two gateways starting at once on a shared directory end up with the same secret: only one creates the file.
 */
export async function loadOrCreateSecret(file: string): Promise<string> {
  const made = randomBytes(32).toString('base64url');
  try {
    await writeFile(file, `${made}\n`, { flag: 'wx', mode: 0o600 });
    return made;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
      throw new Error(`cannot write the gateway's id secret to ${file}: ${(error as Error).message}`);
    }
  }
  const text = (await readFile(file, 'utf8')).trim();
  if (text.length < MIN_SECRET_CHARS) {
    throw new Error(
      `${file} holds ${text.length} characters; the gateway's id secret needs at least ${MIN_SECRET_CHARS}`,
    );
  }
  return text;
}
