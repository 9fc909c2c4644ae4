import { z } from 'zod';
import { Name } from '../names.ts';

/**
 * Who may do what through the gateway. Each bearer token has a name, scopes and optionally the pipelines it is
 * limited to. Tokens are kept as SHA-256 hashes (a tokens file holds no token); a request's token is hashed and
 * compared in constant time.
 *
 * - `read`: tasks, their events and traces, pending approvals;
 * - `submit`: `read`, and submitting, cancelling, sessions;
 * - `approve`: `read`, and deciding approvals and answering questions;
 * - `admin`: everything, on every pipeline.
 */
export const TokenScope = z.enum(['read', 'submit', 'approve', 'admin']);
export type TokenScope = z.infer<typeof TokenScope>;

const SHA256_HEX = /^[0-9a-f]{64}$/;

export const TokenEntry = z.strictObject({
  /** Who holds it: recorded as who decided an approval, and in every refusal's log line. */
  name: z.string().regex(/^[A-Za-z0-9_.@-]{1,64}$/, 'a name of letters, digits, _ . @ -, at most 64'),
  /** The token's SHA-256, hex (`troupe gateway token` writes it). */
  sha256: z.string().regex(SHA256_HEX, 'the token’s SHA-256 as 64 lowercase hex digits'),
  scopes: z.array(TokenScope).min(1),
  /** The pipelines it may touch; every one when absent. */
  pipelines: z.array(Name).min(1).optional(),
});
export type TokenEntry = z.infer<typeof TokenEntry>;

export const TokensFile = z.strictObject({ tokens: z.array(TokenEntry) });
export type TokensFile = z.infer<typeof TokensFile>;
