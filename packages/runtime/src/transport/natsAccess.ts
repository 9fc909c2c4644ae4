import { readFile } from 'node:fs/promises';
import {
  type Authenticator,
  type ConnectionOptions,
  credsAuthenticator,
  nkeyAuthenticator,
} from '@nats-io/transport-node';
import { subjects } from '@troupe/protocol';
import { registerSecret } from '../logging/secrets.ts';

/**
 * How a Troupe process or command proves who it is to NATS, and talks TLS to it. All of it is text, so a second
 * connection (the heartbeat thread's) is made the same way. What a server asks for depends on how it is set up
 * (see docs/permissions.md): a user and password, an nkey, or a `.creds` file in operator (JWT) mode; TLS with a
 * CA of its own, and a client certificate when it verifies clients.
 */
export interface NatsAccess {
  user?: string;
  password?: string;
  /** The text of an nkey seed (`SU…`): the client signs the server's challenge with it. */
  nkeySeed?: string;
  /** The text of a `.creds` file: a user JWT and its nkey seed, for a server in operator mode. */
  creds?: string;
  /** PEM text: the CA that signed the server's certificate, and this client's certificate and key. */
  tls?: { ca?: string; cert?: string; key?: string };
  /**
   * This client's inboxes: replies to its requests come to subjects under it. With one per identity (as
   * `troupe nats-config` gives each), a client may be allowed to read only its own replies.
   */
  inboxPrefix?: string;
}

/** Where the access is read from: files and values, as the CLI and the environment give them. */
export interface NatsAccessSources {
  user?: string | undefined;
  password?: string | undefined;
  /** A file holding an nkey seed. */
  nkey?: string | undefined;
  /** A `.creds` file. */
  creds?: string | undefined;
  tlsCa?: string | undefined;
  tlsCert?: string | undefined;
  tlsKey?: string | undefined;
  /** The client's inbox prefix (a subject under `troupe._inbox`). */
  inbox?: string | undefined;
}

/**
 * Reads the files `sources` names into a {@link NatsAccess}, refusing what cannot work: a password without a user,
 * a certificate without its key, more than one way to log in, a seed file that holds no seed. The password and the
 * seeds become secrets: no log line or event quotes them.
 */
export async function readNatsAccess(sources: NatsAccessSources): Promise<NatsAccess> {
  const ways = [sources.user !== undefined, sources.nkey !== undefined, sources.creds !== undefined];
  if (ways.filter(Boolean).length > 1) {
    throw new NatsAccessError(
      'give one way to log in to NATS: a user and password, an nkey, or a .creds file',
    );
  }
  if (sources.password !== undefined && sources.user === undefined) {
    throw new NatsAccessError('a NATS password needs its user (--user, or NATS_USER)');
  }
  if ((sources.tlsCert === undefined) !== (sources.tlsKey === undefined)) {
    throw new NatsAccessError('a TLS client certificate needs its key, and a key its certificate');
  }
  const access: NatsAccess = {};
  if (sources.user !== undefined) {
    access.user = sources.user;
    if (sources.password !== undefined) access.password = secret(sources.password);
  }
  if (sources.nkey !== undefined) {
    const seed = (await read(sources.nkey, 'nkey seed')).trim();
    if (!/^SU[A-Z2-7]{56}$/.test(seed)) {
      throw new NatsAccessError(
        `${sources.nkey} holds no user nkey seed (a line of 58 characters starting SU)`,
      );
    }
    access.nkeySeed = secret(seed);
  }
  if (sources.creds !== undefined) {
    const creds = await read(sources.creds, 'credentials');
    if (!creds.includes('BEGIN NATS USER JWT') || !creds.includes('BEGIN USER NKEY SEED')) {
      throw new NatsAccessError(`${sources.creds} is not a NATS .creds file (a user JWT and its nkey seed)`);
    }
    const seed = creds.match(/\bSU[A-Z2-7]{56}\b/)?.[0];
    if (seed) secret(seed);
    access.creds = creds;
  }
  const tls: NonNullable<NatsAccess['tls']> = {};
  if (sources.tlsCa !== undefined) tls.ca = await read(sources.tlsCa, 'TLS CA certificate');
  if (sources.tlsCert !== undefined) tls.cert = await read(sources.tlsCert, 'TLS client certificate');
  if (sources.tlsKey !== undefined) tls.key = await read(sources.tlsKey, 'TLS client key');
  if (Object.keys(tls).length > 0) access.tls = tls;
  if (sources.inbox !== undefined) {
    if (!sources.inbox.startsWith(`${subjects.inboxPrefix}.`) || !/^[A-Za-z0-9_.-]+$/.test(sources.inbox)) {
      throw new NatsAccessError(
        `an inbox prefix must be a subject under ${subjects.inboxPrefix}. (e.g. ${subjects.inboxPrefix}.worker-1), not "${sources.inbox}"`,
      );
    }
    access.inboxPrefix = sources.inbox;
  }
  return access;
}

/** The options nats.js connects with for `access`: how to log in, TLS, and the inbox prefix. */
export function connectionOptions(access: NatsAccess | undefined): Partial<ConnectionOptions> {
  const options: Partial<ConnectionOptions> = { inboxPrefix: access?.inboxPrefix ?? subjects.inboxPrefix };
  if (!access) return options;
  if (access.user !== undefined) {
    options.user = access.user;
    if (access.password !== undefined) options.pass = access.password;
  }
  const authenticators: Authenticator[] = [];
  if (access.nkeySeed !== undefined) authenticators.push(nkeyAuthenticator(encode(access.nkeySeed)));
  if (access.creds !== undefined) authenticators.push(credsAuthenticator(encode(access.creds)));
  if (authenticators.length > 0) options.authenticator = authenticators;
  if (access.tls) options.tls = { ...access.tls };
  return options;
}

/** A connection option that cannot be used, with what to do about it. */
export class NatsAccessError extends Error {
  override readonly name = 'NatsAccessError';
}

const encode = (text: string) => new TextEncoder().encode(text);

function secret(value: string): string {
  registerSecret(value);
  return value;
}

async function read(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    throw new NatsAccessError(`cannot read the ${what} file ${file}: ${(error as Error).message}`);
  }
}
