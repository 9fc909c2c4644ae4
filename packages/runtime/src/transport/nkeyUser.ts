import { nkeys } from '@nats-io/transport-node';

/** A new NATS user identity: the nkey seed it logs in with (a secret) and the public key a server config names. */
export interface NkeyUser {
  /** `SU…`: written to the user's `.nk` file, read back by {@link readNatsAccess}'s `nkey`. */
  seed: string;
  /** `U…`: what the server's `authorization` block lists. */
  publicKey: string;
}

/** Makes a new user nkey pair, as `nsc` or `nk -gen user` would. */
export function createNkeyUser(): NkeyUser {
  const user = nkeys.createUser();
  return { seed: new TextDecoder().decode(user.getSeed()), publicKey: user.getPublicKey() };
}
