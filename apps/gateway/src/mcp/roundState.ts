import { createHmac, randomBytes } from 'node:crypto';
import { createRequestStateCodec, type RequestStateCodec } from '@modelcontextprotocol/server';
import { z } from 'zod';

/**
 * Where a pipeline tool's call stands between the rounds of a call that asked the user something (2026-07-28's
 * `input_required`, and the 2025 shim that plays it as elicitation): the task it runs, the stream sequence of the
 * event that asked, what was asked, and the progress count so far. The client holds it, signed, between rounds.
 */
export const RoundState = z.strictObject({
  taskId: z.string(),
  pipeline: z.string(),
  /** The caller it was minted for: a state is never honoured for another. */
  who: z.string(),
  /** The `EVENTS` sequence of the request's event: the next round follows the task from after it. */
  after: z.number().int().nonnegative(),
  /** The approval or question asked. */
  asked: z.string(),
  progress: z.number().int().nonnegative(),
  /** True when the question was asked with its step's declared answer form, whose fields are the answer. */
  declared: z.boolean().optional(),
});
export type RoundState = z.infer<typeof RoundState>;

/**
 * Signs round states, bound to the caller (its token, or the stdio connection). A person may take as long as an
 * approval or question lasts to answer (at most 30 days), so a state holds that long. Gateways that share `secret`
 * honour each other's states; without one, a state holds on the process that minted it.
 */
export function roundStateCodec(secret?: Uint8Array | string): RequestStateCodec<RoundState> {
  const key =
    secret === undefined
      ? randomBytes(32)
      : createHmac('sha256', secret).update('troupe mcp round state').digest();
  return createRequestStateCodec<RoundState>({
    key,
    ttlSeconds: 31 * 86_400,
    bind: (ctx) => `${ctx.mcpReq.method}\0${ctx.http?.authInfo?.clientId ?? 'stdio'}`,
  });
}
