import { createHmac, randomBytes } from 'node:crypto';
import { createRequestStateCodec, type RequestStateCodec } from '@modelcontextprotocol/server';
import type { McpRoundState } from '@troupe/protocol';

/**
 * Signs round states, bound to the caller (its token, or the stdio connection). A person may take as long as an
 * approval or question lasts to answer (at most 30 days), so a state holds that long. Gateways that share `secret`
 * honour each other's states; without one, a state holds on the process that minted it.
 */
export function roundStateCodec(secret?: Uint8Array | string): RequestStateCodec<McpRoundState> {
  const key =
    secret === undefined
      ? randomBytes(32)
      : createHmac('sha256', secret).update('troupe mcp round state').digest();
  return createRequestStateCodec<McpRoundState>({
    key,
    ttlSeconds: 31 * 86_400,
    bind: (ctx) => `${ctx.mcpReq.method}\0${ctx.http?.authInfo?.clientId ?? 'stdio'}`,
  });
}
